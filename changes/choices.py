from django.db import models


class ChangeKind(models.TextChoices):
    """What a request changes when it runs; each kind is run by changes.kinds."""

    SWITCH = "switch", "Switch"
    ALIAS = "alias", "Alias move"
    SERVING = "serving", "Serving-set change"
    ROLLOUT = "rollout", "Rollout across hosts"
    TUNING = "tuning", "Tuning run"


class ChangeState(models.TextChoices):
    OPEN = "open", "Open"
    CHANGES_REQUESTED = "changes_requested", "Changes requested"
    APPROVED = "approved", "Approved"  # it ran, or it is scheduled (a request with a time)
    REJECTED = "rejected", "Rejected"
    WITHDRAWN = "withdrawn", "Withdrawn"
    # Approved with a time, and what it covered differed when due: it did not run (stale_reason),
    # and needs its author's re-confirmation and a fresh approval.
    STALE = "stale", "Stale: did not run, needs a fresh approval"


# A request in these states can still be decided; the others are history.
PENDING_STATES = (ChangeState.OPEN, ChangeState.CHANGES_REQUESTED, ChangeState.STALE)


class Verdict(models.TextChoices):
    """One entry of a request's conversation: a comment, or a decision with its comment."""

    COMMENT = "comment", "Comment"
    APPROVE = "approve", "Approve and run"
    REQUEST_CHANGES = "request_changes", "Ask for changes"
    REJECT = "reject", "Reject"
    RECONFIRM = "reconfirm", "Re-confirm against the host as it is now"
    WITHDRAW = "withdraw", "Withdraw"
