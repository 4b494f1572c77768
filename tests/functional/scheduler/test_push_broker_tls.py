"""Push through RabbitMQ over TLS (``[host_state] push_ssl*``, or
oslo.messaging's ``?ssl=1&ssl_ca_file=...`` in ``push_transport_url``),
against the TLS port of the session's private RabbitMQ
(:func:`tests.servers.rabbitmq`: a CA made for the session, a server
certificate for 127.0.0.1 and localhost, client certificates checked when
sent), real Placement and the host's real agent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins import exception
from compute_plugins.hoststate import broker
from compute_plugins.hoststate.store import HostStateStore
from tests.functional.request.hosts import cell
from tests.functional.scheduler.cloud import Cloud
from tests.functional.scheduler.test_push import ANSWER, NEVER
from tests.functional.scheduler.test_push_broker import sqlite_url, wait_until
from tests.functional.scheduler.test_schedule import new_consumer, spec_of

COMMAND = [sys.executable, "-m", "compute_plugins.cmd.main"]


@pytest.fixture
def rabbit(rabbitmq_server):
    """The private RabbitMQ, running (a test that stopped it restarts it)."""
    if rabbitmq_server.process is None:
        rabbitmq_server.start()
    return rabbitmq_server


def test_a_decision_reaches_its_agent_over_tls(placement, tmp_path, rabbit):
    """The scheduler's store names TLS in the URL as oslo.messaging takes it
    (``?ssl=1&ssl_ca_file=``), the agent's in ``[host_state] push_ssl*``
    with a client certificate: both connect to the TLS-only port, the
    agent is woken by the decision (it polls every 600 s, as does the
    safety net) and the scheduler by the answer."""
    files = rabbit.tls
    url = sqlite_url(tmp_path)
    cloud = Cloud(placement, str(tmp_path), store=HostStateStore(
        url, safety_poll_interval=NEVER,
        push_transport_url="%s?ssl=1&ssl_ca_file=%s" % (rabbit.tls_transport_url, files.ca)))
    own = HostStateStore(url, safety_poll_interval=NEVER,
                         push_transport_url=rabbit.tls_transport_url,
                         push_tls=broker.TLS(enabled=True, ca_file=str(files.ca),
                                             cert_file=str(files.client_cert),
                                             key_file=str(files.client_key)))
    try:
        assert isinstance(own.db.push, broker.BrokerPush) and own.db.push.tls.enabled
        host = cloud.add_host("tls", [cell(4, 4096)], start=False, store=own,
                              lease_duration=1800.0)
        host.agent.claim_poll_interval = NEVER
        host.start()
        assert wait_until(host.agent.pushed)
        sched = cloud.scheduler(answer_timeout=ANSWER)
        consumer = new_consumer()
        result = sched.schedule(spec_of(sched, {}, 1, 512), consumer, "p", "u")
        assert result.placed, result.reasons
        assert [a.outcome for a in result.attempts] == ["claimed"]
        assert result.timings["claim"] < 2.0
        assert consumer in host.agent.ledger.entries()
    finally:
        cloud.close()
        own.close()


def _conf(transport_url: str, tmp_path, **options: object) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    conf.set_override("connection", sqlite_url(tmp_path), "host_state")
    conf.set_override("push_transport_url", transport_url, "host_state")
    for name, value in options.items():
        conf.set_override(name, value, "host_state")
    return conf


def test_a_wrong_ca_stops_the_command_naming_the_option_and_the_file(tmp_path, rabbit):
    """A process opened from its configuration (the CLI here, an agent or
    a scheduler alike: :meth:`HostStateStore.from_config`) whose CA does
    not vouch for the broker's certificate exits 2 with one line naming the
    option and the file; no traceback (before: TLS could not be set at
    all, and a failure to connect was only a warning while waiters
    polled forever)."""
    config = tmp_path / "compute-plugins.conf"
    config.write_text("[host_state]\nconnection = %s\npush_transport_url = %s\n"
                      "push_ssl = true\npush_ssl_ca_file = %s\n"
                      % (sqlite_url(tmp_path), rabbit.tls_transport_url, rabbit.tls.other_ca))
    result = subprocess.run(
        COMMAND + ["--config-file", str(config), "release", "--consumer", str(uuid.uuid4()),
                   "--no-wait"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == (
        "compute-plugins: configuration error: [host_state] push_transport_url "
        "rabbit://guest:***@127.0.0.1:%d/: broker 127.0.0.1:%d: its certificate is not "
        "trusted by [host_state] push_ssl_ca_file %s (self-signed certificate in "
        "certificate chain)" % (rabbit.tls_port, rabbit.tls_port, rabbit.tls.other_ca))
    assert "Traceback" not in result.stderr


def test_plain_amqp_to_a_tls_port_is_refused_clearly(tmp_path, rabbit):
    """``rabbit://`` without TLS to the TLS-only port: the broker resets
    the connection; said as the port speaking TLS, naming the option."""
    with pytest.raises(exception.ConfigError) as err:
        HostStateStore.from_config(_conf(rabbit.tls_transport_url, tmp_path))
    assert str(err.value) == (
        "[host_state] push_transport_url rabbit://guest:***@127.0.0.1:%d/: broker "
        "127.0.0.1:%d speaks TLS and [host_state] push_ssl is not set: set it (or "
        "?ssl=1 in push_transport_url) and [host_state] push_ssl_ca_file"
        % (rabbit.tls_port, rabbit.tls_port))


def test_tls_to_a_plain_port_is_refused_clearly(tmp_path, rabbit):
    with pytest.raises(exception.ConfigError) as err:
        HostStateStore.from_config(_conf(
            "%s?ssl=1&ssl_ca_file=%s" % (rabbit.transport_url, rabbit.tls.ca), tmp_path))
    message = str(err.value)
    assert "broker 127.0.0.1:%d: the TLS handshake got no TLS answer" % rabbit.port \
        in message, message
    assert "a plain AMQP port? push_transport_url's ?ssl is set" in message


def test_a_client_certificate_the_broker_does_not_trust_is_named(tmp_path, rabbit):
    """The broker checks a client certificate that is sent: one of another
    CA is refused, and the error names ``push_ssl_cert_file`` (which also
    shows that the certificate is sent)."""
    files = rabbit.tls
    with pytest.raises(exception.ConfigError) as err:
        HostStateStore.from_config(_conf(
            rabbit.tls_transport_url, tmp_path, push_ssl=True, push_ssl_ca_file=str(files.ca),
            push_ssl_cert_file=str(files.other_client_cert),
            push_ssl_key_file=str(files.other_client_key)))
    message = str(err.value)
    assert "broker 127.0.0.1:%d refused the TLS handshake" % rabbit.tls_port in message
    assert "does it trust [host_state] push_ssl_cert_file %s?" % files.other_client_cert \
        in message, message
    with HostStateStore.from_config(_conf(
            rabbit.tls_transport_url, tmp_path, push_ssl=True, push_ssl_ca_file=str(files.ca),
            push_ssl_cert_file=str(files.client_cert),
            push_ssl_key_file=str(files.client_key))) as store:
        assert isinstance(store.db.push, broker.BrokerPush)


def test_the_broker_named_localhost_is_checked_by_that_name(tmp_path, rabbit):
    """The certificate names 127.0.0.1 and localhost: a URL naming either
    connects (kombu's rewriting of localhost to 127.0.0.1 does not change
    the name checked); oslo.messaging's ``ssl_version`` pins the version."""
    url = "rabbit://guest:guest@localhost:%d/?ssl=1&ssl_ca_file=%s&ssl_version=TLSv1_2" % (
        rabbit.tls_port, rabbit.tls.ca)
    with HostStateStore.from_config(_conf(url, tmp_path)) as store:
        assert isinstance(store.db.push, broker.BrokerPush)
        assert _listens(store)


def _listens(store: HostStateStore) -> bool:
    """Whether ``store``'s listener connects (a waiter's subscription live)."""
    sub = store.host_changes("h")
    assert sub is not None
    try:
        return wait_until(lambda: sub.live)
    finally:
        sub.close()


def test_a_running_process_says_a_refused_certificate_as_an_error(tmp_path, rabbit, caplog):
    """A store opened without the start check (as a long-running process
    whose broker's certificate changed later): its listener says, once and
    as an error, which option and file do not vouch for the broker, and
    its waiters poll meanwhile."""
    url = "%s?ssl=1&ssl_ca_file=%s" % (rabbit.tls_transport_url, rabbit.tls.other_ca)
    with HostStateStore(sqlite_url(tmp_path), push_transport_url=url) as store:
        sub = store.host_changes("h")
        assert sub is not None
        try:
            assert wait_until(lambda: any(
                "cannot listen for changes" in r.getMessage() for r in caplog.records))
            assert not sub.live
        finally:
            sub.close()
    said = [r for r in caplog.records if "cannot listen for changes" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "ERROR"
    assert ("its certificate is not trusted by push_transport_url's ?ssl_ca_file %s"
            % rabbit.tls.other_ca) in said[0].getMessage()


def test_each_broker_of_the_url_is_checked_by_its_own_name(tmp_path, rabbit):
    """The first broker (``127.0.0.2``, which the certificate does not
    name) is down; the second, ``localhost``, is checked by that name, not
    by the first one's (kombu's failover shares one ``server_hostname``
    between the URLs: the certificate would be refused)."""
    url = ("rabbit://guest:guest@127.0.0.2:%d,guest:guest@localhost:%d/?ssl=1&ssl_ca_file=%s"
           % (rabbit.tls_port, rabbit.tls_port, rabbit.tls.ca))
    with HostStateStore.from_config(_conf(url, tmp_path)) as store:
        push = store.db.push
        assert isinstance(push, broker.BrokerPush)
        assert push._control is not None  # NOTE: the start's check connected
        assert _listens(store)


def test_a_tls_publishing_connection_dropped_without_a_word_is_let_go_at_once(
        tmp_path, rabbit):
    """A TLS publishing connection that a relay stops forwarding (a NAT or
    a firewall that forgot it) is noticed by its heartbeat (2 s here) and
    let go without any closing handshake, TLS's included: TLS's
    ``close_notify`` exchange would wait for the silent peer the socket's
    read timeout (10 s), the publisher's lock held, and hold up the next
    wake-up (and every waiter's binding) as long (5 s here). Here the
    wake-up committed once the connection is dropped reaches its waiter
    within a new connection's handshakes and a loaded machine's margin."""
    from tests.functional.scheduler.test_push_broker import stalled_publisher, wake

    beat = broker.Heartbeat(timeout_threshold=2, rate=3)
    query = "?ssl=1&ssl_ca_file=%s" % rabbit.tls.ca
    with stalled_publisher(tmp_path, rabbit, rabbit.tls_port, query, beat) as (
            writer, sub, push):
        assert push.tls.enabled
        assert wait_until(lambda: push._control is None, 30)
        woken = time.monotonic()
        wake(writer, "h")
        assert sub.wait(broker.IO_TIMEOUT)
        took = time.monotonic() - woken
        # NOTE: a new connection's handshakes (TCP, TLS, AMQP) and a
        # loaded machine's margin, not TLS's close (5 s here).
        assert took < 3.0, took
