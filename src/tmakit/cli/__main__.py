# `python -m tmakit.cli`, as when the command was one module (`python -m tmakit` is the usual way).
import sys

from . import main

sys.exit(main())
