import sys

from minibroker.cli.main import main

sys.exit(main())
