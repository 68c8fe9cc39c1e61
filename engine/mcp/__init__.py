"""`proctor mcp`: Proctor as an MCP server over stdio, so a coding agent can list, run and
read evals itself (the official `mcp` SDK's MCPServer; nothing here speaks JSON-RPC).

    folder.py   the one folder the server may read eval files from
    views.py    what the tools return: stored records, bounded in size and paged
    batches.py  batches started by the server (trigger `mcp`), waited for, closed at exit
    server.py   the tools, and `serve`

The engine imports none of this; only `proctor mcp` does, lazily, so no other command
loads the SDK.
"""

# `proctor mcp --help` prints this as it is (RawDescriptionHelpFormatter): it must stay valid JSON.
CLIENT_CONFIG = """\
Add it to an MCP client's configuration (Claude Desktop, Claude Code, Cursor, …):

{
  "mcpServers": {
    "proctor": {
      "command": "proctor",
      "args": ["mcp", "/path/to/evals"]
    }
  }
}

Tools: list_cases, run_cases, wait_batch, list_batches, show_trial, search, failure_groups.
Paths outside FOLDER are refused; runs started here carry the trigger `mcp`."""
