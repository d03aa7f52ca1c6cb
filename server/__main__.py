"""`python -m server`: see server.main."""

from server.main import main

raise SystemExit(main())
