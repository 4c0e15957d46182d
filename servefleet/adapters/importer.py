"""Read the engines running on a node for ``servefleet import``: one SSH round trip that
lists every container (``docker ps -a``), inspects them and their images, and hands the
documents to :mod:`servefleet.core.adopt`.

A secret value never leaves the node. ``docker inspect`` is asked through a ``--format``
template (:func:`container_template`) that prints only the fields the import reads, one JSON
object a line, and prints a secret variable (a name with ``TOKEN``, ``KEY``, ``SECRET``,
``PASSWORD``, ``PASSWD`` or ``CREDENTIAL`` in it, or one the stack lists) as its name alone.
In the command line it replaces, on the node, the value of a secret flag (``--api-key X``,
``--hf-token=X``) and any argument that holds a secret variable's value by
:data:`~servefleet.core.adopt.inspect.SECRET_VALUE`. What crosses the wire is: the id, name,
state, image, labels, the environment without secret values, the command line without
secret values, the mounts, the network mode, the published ports, the GPU reservation and
the restart policy; of each image, its id, repo digests, labels and environment (secret
values left out the same way).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

from servefleet.adapters.runtime import connect
from servefleet.core.adopt import RunningEngine, running_engines
from servefleet.core.adopt.inspect import SECRET_VALUE
from servefleet.core.errors import RemoteError
from servefleet.core.models import Node

SEPARATOR = "--servefleet-import-images--"
"""The line between the containers' documents and the images' documents."""
# Constant: the templates arrive as its arguments ("$1", "$2"). An image a container was
# created from may be gone (`docker image inspect` then fails for it alone), hence the
# `|| true`; the containers' listing and inspect must succeed.
SCRIPT = f"""set -e
ids=$(docker ps -a -q --no-trunc)
if [ -z "$ids" ]; then echo {SEPARATOR}; exit 0; fi
docker inspect --type container --format "$1" $ids
echo {SEPARATOR}
images=$(docker inspect --type container --format '{{{{.Image}}}}' $ids | sort -u)
docker image inspect --format "$2" $images 2>/dev/null || true
"""
TIMEOUT_SECONDS = 60

SECRET_NAME_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
"""Words that make a variable's name secret (as :data:`~servefleet.core.adopt.inspect.
SECRET_NAME_RE` says, case-insensitive)."""
SECRET_FLAG_WORDS = ("token", "key", "secret", "password", "passwd", "credential",
                     "credentials")
"""Words of a flag's name (split at ``-`` and ``_``) that make its value secret (as
:data:`~servefleet.core.adopt.inspect.SECRET_FLAG_RE` says)."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def _secret_name_test(var: str, listed: Collection[str]) -> str:
    """A template expression: whether the variable named ``var`` (a template variable
    holding the name) is secret."""
    words = [f'(gt (len (split (upper {var}) "{w}")) 1)' for w in SECRET_NAME_WORDS]
    # Listed names are names, never values; only well-formed ones are written into the
    # template (a variable cannot be called otherwise), as JSON strings (Go's syntax too).
    words += [f"(eq {var} {json.dumps(name)})" for name in sorted(set(listed))
              if _NAME.fullmatch(name)]
    return f"(or {' '.join(words)})"


def _env_template(field: str, listed: Collection[str]) -> str:
    """The JSON array of ``field``'s ``NAME=value`` items, a secret one as ``NAME``."""
    secret = _secret_name_test("$n", listed)
    return (f'[{{{{range $i, $e := {field}}}}}{{{{if $i}}}},{{{{end}}}}'
            f'{{{{$n := index (split $e "=") 0}}}}'
            f'{{{{if {secret}}}}}{{{{json $n}}}}{{{{else}}}}{{{{json $e}}}}{{{{end}}}}'
            '{{end}}]')


def _args_template(listed: Collection[str]) -> str:
    """The JSON array of the container's arguments with secret values replaced."""
    secret = _secret_name_test("$n", listed)
    flag_word = " ".join(f'(eq . "{w}")' for w in SECRET_FLAG_WORDS)
    marker = json.dumps(SECRET_VALUE)
    return (
        '[{{$hide := false}}{{range $i, $a := .Args}}{{if $i}},{{end}}'
        # Does the argument hold a secret variable's value (4 characters or more)?
        '{{$hit := false}}{{range $.Config.Env}}{{$p := split . "="}}{{$n := index $p 0}}'
        '{{$v := join (slice $p 1) "="}}'
        f'{{{{if and {secret} (ge (len $v) 4) (gt (len (split $a $v)) 1)}}}}'
        '{{$hit = true}}{{end}}{{end}}'
        # Is it a flag whose name says its value is secret?
        '{{$f := index (split $a "=") 0}}{{$sf := false}}'
        '{{if eq (printf "%.1s" $a) "-"}}{{range split (lower $f) "-"}}{{range split . "_"}}'
        f'{{{{if or {flag_word}}}}}{{{{$sf = true}}}}{{{{end}}}}{{{{end}}}}{{{{end}}}}{{{{end}}}}'
        f'{{{{if $hide}}}}{marker}{{{{$hide = false}}}}'
        f'{{{{else if $hit}}}}{marker}'
        '{{else if $sf}}{{if gt (len (split $a "=")) 1}}'
        f'{{{{json (printf "%s=%s" $f {marker})}}}}'
        '{{else}}{{json $a}}{{$hide = true}}{{end}}'
        '{{else}}{{json $a}}{{end}}{{end}}]')


def container_template(secret_names: Collection[str] = ()) -> str:
    """``docker inspect --format`` of one container: one line of JSON, secret values left
    out (see the module docstring)."""
    return (
        '{"Id":{{json .Id}},"Name":{{json .Name}},"Path":{{json .Path}},'
        f'"Args":{_args_template(secret_names)},"Image":{{{{json .Image}}}},'
        '"State":{"Status":{{json .State.Status}}},'
        '"Config":{"Image":{{json .Config.Image}},"Labels":{{json .Config.Labels}},'
        f'"Env":{_env_template(".Config.Env", secret_names)}}},'
        '"HostConfig":{"NetworkMode":{{json .HostConfig.NetworkMode}},'
        '"PortBindings":{{json .HostConfig.PortBindings}},'
        '"DeviceRequests":{{json .HostConfig.DeviceRequests}},'
        '"RestartPolicy":{{json .HostConfig.RestartPolicy}}},'
        '"Mounts":{{json .Mounts}}}')


def image_template(secret_names: Collection[str] = ()) -> str:
    """``docker image inspect --format`` of one image: one line of JSON."""
    return (
        '{"Id":{{json .Id}},"RepoDigests":{{json .RepoDigests}},"Config":'
        '{{if .Config}}{"Labels":{{json .Config.Labels}},'
        f'"Env":{_env_template(".Config.Env", secret_names)}}}{{{{else}}}}null{{{{end}}}}}}')


def import_argv(secret_names: Collection[str] = ()) -> list[str]:
    """The one command run on the node."""
    return ["sh", "-c", SCRIPT, "sh", container_template(secret_names),
            image_template(secret_names)]


def _documents(node: str, text: str, what: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            document = json.loads(line)
        except json.JSONDecodeError as error:
            raise RemoteError(node, what, 0, f"unreadable output ({error})") from None
        if not isinstance(document, dict):
            raise RemoteError(node, what, 0, "unexpected output (not a JSON object)")
        found.append(document)
    return found


def split_listing(node: str, text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The containers' and the images' documents from the command's output."""
    head, sep, tail = ("\n" + text).partition(f"\n{SEPARATOR}\n")
    if not sep:
        head, sep, tail = ("\n" + text).partition(f"\n{SEPARATOR}")
    if not sep:
        raise RemoteError(node, "docker inspect", 0, "unexpected output (no separator line)")
    return (_documents(node, head, "docker inspect"),
            _documents(node, tail, "docker image inspect"))


def read_engines(node: Node, *, secret_names: Collection[str] = (),
                 sim_env: Collection[str] = (), connect_attempts: int = 2) -> list[RunningEngine]:
    """Every inference-engine container on ``node`` (running or stopped), by name.

    Raises :class:`~servefleet.core.errors.UnreachableNode`, ``HostKeyMismatch`` or
    :class:`~servefleet.core.errors.RemoteError` (Docker not usable) in one line each.
    """
    with connect(node, connect_attempts=connect_attempts) as transport:
        done = transport.run(import_argv(secret_names), idempotent=True,
                             timeout=TIMEOUT_SECONDS, what="docker ps + inspect (import)")
    containers, images = split_listing(node.name, done.text())
    return running_engines(containers, images, secret_names=secret_names, sim_env=sim_env)
