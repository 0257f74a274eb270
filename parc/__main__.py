from parc.cli import main

raise SystemExit(main())
