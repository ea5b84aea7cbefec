"""``python -m dpnets``: the command line (also what ``torchrun -m dpnets`` launches)."""

from dpnets.cli import main

raise SystemExit(main())
