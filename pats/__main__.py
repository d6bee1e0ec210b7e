import sys

from pats.cli.main import main

sys.exit(main())
