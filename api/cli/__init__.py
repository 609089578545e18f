"""The `compactd` command line: up, tenants, import/export, stats, offline tools."""
