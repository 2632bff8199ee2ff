"""Your agents. List each module in template.yaml's AGENT_MODULES (Globals)."""
