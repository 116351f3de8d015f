"""The agent layer (Workflow protocol); filled in by the agent-workflow issue."""
