"""What opsloop ships to try it without a workspace: the Slack stand-in (standin/), `opsloop demo` (demo/) and
`opsloop sandbox` (sandbox/). Only the CLI's demo and sandbox commands import it; nothing the bot runs does."""
