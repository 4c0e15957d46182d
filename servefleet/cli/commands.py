"""The sub-commands of ``servefleet``, in the order ``--help`` lists them.

Each entry maps a command name to ``"module:attribute"``; the module is imported only when
the command runs or ``--help`` describes it (:class:`servefleet.cli.main.LazyGroup`), so a
command's heavy imports never slow down another. Registering a command is one line here.
"""

from __future__ import annotations

ALL: dict[str, str] = {
    "init": "servefleet.cli.init:init_command",
    "node": "servefleet.cli.node:node_group",
    "validate": "servefleet.cli.validate:validate_command",
    "show": "servefleet.cli.render:show_command",
    "diff-profiles": "servefleet.cli.render:diff_profiles_command",
    "render": "servefleet.cli.render:render_command",
    "plan": "servefleet.cli.plan:plan_command",
    "deploy": "servefleet.cli.deploy:deploy_command",
    "rollback": "servefleet.cli.releases:rollback_command",
    "unlock": "servefleet.cli.releases:unlock_command",
    "releases": "servefleet.cli.releases:releases_command",
    "history": "servefleet.cli.history:history_command",
    "models": "servefleet.cli.models:models_group",
    "bench": "servefleet.cli.bench:bench_command",
    "logs": "servefleet.cli.logs:logs_group",
    "health": "servefleet.cli.health:health_command",
    "gateway": "servefleet.cli.gateway:gateway_group",
    "drift": "servefleet.cli.drift:drift_command",
    "nightly": "servefleet.cli.drift:nightly_group",
    "watch": "servefleet.cli.watch:watch_group",
    "probe": "servefleet.cli.nodes:probe_command",
    "keyscan": "servefleet.cli.nodes:keyscan_command",
    "doctor": "servefleet.cli.doctor:doctor_command",
    "tune": "servefleet.cli.tune:tune_command",
    "import": "servefleet.cli.import_:import_command",
    "schema": "servefleet.cli.schema:schema_command",
    "sim": "servefleet.cli.sim:sim",
}
"""Command name → ``"module:attribute"`` of its click command, in help order."""

SECTIONS: dict[str, tuple[str, ...]] = {
    "Set up": ("init", "node", "validate", "keyscan", "probe", "doctor", "import", "schema"),
    "Deploy": ("show", "diff-profiles", "render", "plan", "deploy", "rollback", "unlock",
               "releases"),
    "Observe": ("health", "logs", "history", "drift", "nightly", "watch", "models"),
    "Tune": ("tune", "bench"),
    "Fleet services": ("gateway",),
    "Test bed": ("sim",),
}
"""The headings ``servefleet --help`` groups the commands under, in order; every command
of :data:`ALL` is in exactly one."""
