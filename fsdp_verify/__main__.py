from fsdp_verify.commands.cli import main

raise SystemExit(main())
