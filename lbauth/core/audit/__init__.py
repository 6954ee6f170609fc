"""The audit log (contract 21): who did what to an account, and when.

`events.record` writes an event in the caller's unit of work (the transaction of the change it
records); `log.AuditLog` reads them (a user's activity, the operators' listing) and deletes the
old ones; `agents.describe_agent` puts a User-Agent header in words for the pages.
"""

from lbauth.core.audit.agents import describe_agent
from lbauth.core.audit.events import (
    NO_SOURCE,
    OPERATOR,
    SYSTEM,
    Actor,
    ActorKind,
    EventType,
    Outcome,
    Source,
    record,
)

__all__ = ["NO_SOURCE", "OPERATOR", "SYSTEM", "Actor", "ActorKind", "EventType", "Outcome", "Source",
           "describe_agent", "record"]
