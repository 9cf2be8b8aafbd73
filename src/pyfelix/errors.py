"""Errors and problem reports shared by every stage.

Every exception pyfelix raises is a PyfelixError; those that are also a kind of builtin error
(a bad value, an unavailable facility) subclass it too, so callers may catch either::

    PyfelixError
    ├── ManifestError            a file, document or etcd value could not be read as resources
    │                            (.problems: every problem found)
    ├── SelectorError            a selector did not parse; names the position    (ValueError)
    ├── ParamError               a Felix parameter value Felix would refuse       (ValueError)
    │                            (pyfelix.config.text)
    ├── TooDeep                  a free-form value nested too deeply              (ValueError)
    │                            (pyfelix.resources.schema)
    ├── ConversionError          a Kubernetes object Calico cannot convert        (ValueError)
    │                            (pyfelix.resources.k8s_conversion)
    ├── NftUnsupported           a rule the nftables renderer has no case for     (ValueError)
    │                            (pyfelix_dataplane.rules.nft)
    ├── MarkMaskTooSmall         IptablesMarkMask has too few bits for the rules  (ValueError)
    │                            (pyfelix_dataplane.rules.marks)
    ├── InotifyUnavailable       no inotify here; the file syncer polls           (OSError)
    │                            (pyfelix.syncer.inotify)
    ├── EtcdError                an etcd request failed (pyfelix.datastore.etcd)
    │   ├── EtcdUnavailable      no configured endpoint could be reached
    │   ├── EtcdTLSError         a TLS file unusable; the message names it and why
    │   ├── EtcdCompacted        a watch fell behind a compaction: re-list
    │   └── GrpcError            the first listing's gRPC call refused, or its answer
    │                            unreadable (pyfelix.datastore.etcd_grpc; its child only)
    ├── KubeError                a Kubernetes API request failed (pyfelix.datastore.kubernetes;
    │   │                        .status: the HTTP status)
    │   ├── KubeUnavailable      the API server unreachable, or silent past the timeout
    │   ├── KubeGone             410: the resource version is gone: re-list
    │   ├── KubeForbidden        401/403: credentials or RBAC refuse the request
    │   ├── KubeNotFound         404: the API (a CRD) or the object does not exist
    │   └── KubeConfigError      no usable kubeconfig or service account
    ├── CommandError             a `pyfelix datastore` command cannot be carried out
    ├── MetricsTLSError          a PrometheusMetrics* TLS file is missing or unusable (OSError)
    │                            (pyfelix.metrics)
    ├── DataplaneWriteError      a kernel write failed: a tool's refusal with its failing line,
    │                            or an OSError, netlink error or timeout mapped where the
    │                            writer met it (pyfelix_dataplane.linux.commands.writing)
    └── Shutdown                 the agent must stop, after a 2 s pause (pyfelix.connector)
        ├── RestartRequired      exit 129: restart with the new settings
        └── FatalShutdown        exit 1: Felix's fatal exit (the datastore is not ready)

Exceptions from below (OSError, NetlinkError, yaml and JSON errors, RecursionError) are mapped
where they enter: into Problems by the loader, into ManifestError by the etcd value decoder,
into DataplaneWriteError by the kernel writers; nothing above those points catches them raw.

Problems are values, not exceptions: loading and validation collect every problem they find, so a
user sees all of them at once. Each one names where it came from (file and line), the resource
(Kind/namespace/name), the field path and what is wrong.
"""

from __future__ import annotations

import re

import attrs


@attrs.frozen
class FieldProblem:
    """Something wrong with one field of a resource; ``field`` is a dotted path (may be "")."""

    field: str
    message: str


@attrs.frozen
class Problem:
    """A problem located in a source: ``file[:line]: Kind/namespace/name: field.path: message``."""

    source: str
    message: str
    line: int | None = None
    resource: str | None = None
    field: str = ""

    def __str__(self) -> str:
        parts = [self.source if self.line is None else f"{self.source}:{self.line}"]
        if self.resource:
            parts.append(self.resource)
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return one_line(": ".join(parts))


#: Characters that would end or rewrite a line of output: C0 controls, DEL, and Unicode's
#: line and paragraph separators (NEL, LS, PS).
_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with every character that could break a line escaped (``\\n``): a resource
    name or file name that holds a line break must not forge a log or output line."""
    return _CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode(), text)


#: How much of a value a message may quote: enough to recognise it, never a file's content.
EXCERPT = 40


def excerpt(value: object) -> str:
    """A short, escaped rendering of a value for an error message (repr, cut to EXCERPT
    characters with the full length said), so a file that is not a manifest (a private key
    someone linked in) is never echoed into logs."""
    text = repr(value)
    if len(text) <= EXCERPT:
        return text
    return f"{text[: EXCERPT - 1]}… ({len(text)} characters)"


class PyfelixError(Exception):
    """Base of pyfelix's own exceptions."""


#: What systemd (or any supervisor) is told when the agent must start again (Felix's code).
RESTART_EXIT_CODE = 129


class Shutdown(PyfelixError):
    """The agent must stop, with ``exit_code``: after Felix's pause against a tight restart
    loop (SHUTDOWN_PAUSE), for its supervisor to start it again."""

    exit_code = 1


class RestartRequired(Shutdown):
    """The agent must stop and be restarted with new settings (exit code 129)."""

    exit_code = RESTART_EXIT_CODE


class FatalShutdown(Shutdown):
    """Felix's fatal exit (code 1): the agent cannot go on (the datastore is not ready)."""


class DataplaneWriteError(PyfelixError):
    """A kernel write failed; ``line`` is the input line the tool rejected, when it says."""

    def __init__(self, command: str, stderr: str, line: str = "") -> None:
        detail = f" (failing line: {line})" if line else ""
        super().__init__(f"{command} failed: {stderr.strip()}{detail}")
        self.command, self.stderr, self.line = command, stderr, line

    def __reduce__(self) -> tuple[type[DataplaneWriteError], tuple[str, str, str]]:
        # Picklable with its arguments, so a writer's failure in another process reads as one.
        return (type(self), (self.command, self.stderr, self.line))


class ManifestError(PyfelixError):
    """Input that cannot be turned into resources; carries every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems
