from parc.cli.main import main

raise SystemExit(main())
