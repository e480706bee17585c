"""``python -m client.cli``: the ``blink`` command."""

import sys

from client.cli import main

sys.exit(main())
