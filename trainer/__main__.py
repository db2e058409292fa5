"""`python -m trainer [--recipe NAME] [--config FILE] [key=value ...]`: parse, build, train, close."""

import sys

from trainer.cli import main

sys.exit(main())
