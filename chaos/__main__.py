"""`python -m chaos run|list|validate|correlate|judge`."""

import sys

from chaos.cli import main

sys.exit(main())
