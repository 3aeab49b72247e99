import sys

from hpcdispatch.cli import main

sys.exit(main())
