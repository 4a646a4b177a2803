"""``python -m pynamesrv.pipeline run|routes-at|generate …``, and the script for spark-submit.

``spark-submit`` runs a file, not a module, so a cluster job points at this file:
``spark-submit --master spark://… "$(python -c 'import pynamesrv.pipeline.__main__ as m;
print(m.__file__)')" run --journal hdfs://…``. The executors need no Python packages: the
job uses the DataFrame API only.
"""

from __future__ import annotations

from pynamesrv.cli.pipeline import main

if __name__ == "__main__":
    main()
