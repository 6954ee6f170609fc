"""`python -m lbauth` is the `lbauth` command."""

from lbauth.cli import main

raise SystemExit(main())
