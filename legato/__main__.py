import sys

from legato.cli import main

sys.exit(main())
