from fsdp_verify.commands.cli import entry

raise SystemExit(entry())
