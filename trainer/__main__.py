"""`python -m trainer [--recipe NAME] [--config FILE] [key=value ...]`: parse, build, train, close."""

from trainer.cli import exit_process, main

exit_process(main())
