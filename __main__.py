"""The Pulumi program: one servefleet ``NodeDeployment`` per node of the chosen stack, and one
``MultiNodeDeployment`` per engine spanning nodes (``servefleet:multiNode``).

Profiles per node, the rollout strategy and secrets live in ``Pulumi.<stack>.yaml``; see
:mod:`servefleet.adapters.pulumi_program` for what is declared and exported.
"""

from pathlib import Path

from servefleet.adapters.pulumi_program import run

run(Path(__file__).resolve().parent)
