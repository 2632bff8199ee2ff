"""Side effects that never repeat: tool declarations and the PREPARE → EXECUTE → COMMIT protocol."""
