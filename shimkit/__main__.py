import sys

from shimkit.cli import main

sys.exit(main())
