"""The side-effect sandwich: PREPARE -> EXECUTE -> COMMIT.

Its records, its conditional writes, the recovery of PREPARED calls, and compensation.
"""
