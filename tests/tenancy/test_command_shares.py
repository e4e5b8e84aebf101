"""Shares of what the command consumers hold and of the commands waiting at the gateway:
the admission's rule, nobody refused while there is room, a tenant under its share never."""

from __future__ import annotations

from collections import Counter

from agency.services.gateway.backlog import CommandBacklog
from agency.services.tenancy.admission import AdmissionSettings
from agency.services.tenancy.held_shares import HeldShares


def test_a_consumer_with_room_refuses_nobody() -> None:
    shares = HeldShares(AdmissionSettings(), capacity=4)
    assert [shares.hold("b", 0.0, refusable=True) for _ in range(4)] == [None] * 4
    assert shares.held("b") == 4


def test_a_full_consumer_refuses_a_tenant_at_its_share_and_admits_one_under_it() -> None:
    shares = HeldShares(AdmissionSettings(), capacity=4)
    for _ in range(3):
        assert shares.hold("b", 0.0, refusable=True) is None
    assert shares.hold("a", 0.0, refusable=True) is None
    refused = shares.hold("b", 1.0, refusable=True)
    assert refused is not None and refused.startswith("tenant_share_exceeded: ")
    assert "the tenant has 3 commands held by this consumer" in refused, refused
    assert "its share is 2" in refused, refused
    assert shares.held("b") == 3  # a refusal counts nothing
    assert shares.hold("a", 1.0, refusable=True) is None


def test_what_the_services_or_the_http_side_sent_is_counted_but_never_refused() -> None:
    shares = HeldShares(AdmissionSettings(), capacity=2)
    for _ in range(5):
        assert shares.hold("b", 0.0, refusable=False) is None
    assert shares.held("b") == 5
    assert shares.hold("b", 0.0, refusable=True) is not None
    for _ in range(4):
        shares.release("b", 1.0)
    assert shares.hold("b", 1.0, refusable=True) is None


def test_shares_switched_off_refuse_nothing() -> None:
    shares = HeldShares(AdmissionSettings(enabled=False), capacity=1)
    assert [shares.hold("b", 0.0, refusable=True) for _ in range(3)] == [None] * 3


def test_the_gateway_refuses_a_tenant_at_its_share_of_the_commands_waiting() -> None:
    backlog = CommandBacklog(AdmissionSettings(commands_waiting=10))
    backlog.waiting = Counter({"b": 9})
    assert backlog.refusal("b") is None  # under the bound: nobody is refused
    backlog.stored("b")
    refused = backlog.refusal("b")
    assert refused is not None and refused.retry_after >= 1
    assert "the tenant has 10 commands waiting for the services, its share is 10" in str(refused)
    assert backlog.refusal("a") is None  # a tenant with none waiting
    backlog.stored("a")
    assert backlog.refusal("a") is None  # under its share of 5
    assert backlog.refusal("b") is not None
