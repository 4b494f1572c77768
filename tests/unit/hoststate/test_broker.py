"""Push through a broker, the pieces that need no broker
(:mod:`compute_plugins.hoststate.broker`); against a private RabbitMQ:
``tests/functional/scheduler/test_push_broker.py``."""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time

import pytest
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins import exception
from compute_plugins.hoststate import broker, notify
from compute_plugins.hoststate.store import HostStateStore


def test_an_oslo_messaging_url_becomes_one_broker_url_per_host():
    assert broker.broker_urls("rabbit://guest:guest@127.0.0.1:5672/") == [
        "pyamqp://guest:guest@127.0.0.1:5672/%2F"]
    assert broker.broker_urls("rabbit://u:p@a:5672,u:q@b:5673/nova") == [
        "pyamqp://u:p@a:5672/nova", "pyamqp://u:q@b:5673/nova"]


@pytest.mark.parametrize("url", ["kafka://h:9092/", "rabbit:///", "localhost:5672",
                                 "rabbit://u:p@/x"])
def test_a_url_no_broker_serves_is_refused_in_one_line_naming_the_option(url):
    with pytest.raises(ValueError) as err:
        HostStateStore("sqlite://", push_transport_url=url)
    message = str(err.value)
    assert message.startswith("[host_state] push_transport_url")
    assert "expected rabbit://USER:PASS@HOST:PORT/VHOST" in message
    assert "\n" not in message


def test_passwords_are_hidden_in_messages():
    assert broker.redacted("rabbit://u:secret@a:5672,v:other@b:5672/vh") == \
        "rabbit://u:***@a:5672,v:***@b:5672/vh"
    with pytest.raises(ValueError) as err:
        broker.broker_urls("kafka://u:secret@h/")
    assert "secret" not in str(err.value)


def test_the_option_chooses_the_broker_whatever_the_database():
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    conf.set_override("connection", "sqlite://", "host_state")
    with HostStateStore.from_config(conf) as store:
        assert store.db.push is None  # NOTE: SQLite without a broker polls
    conf.set_override("push_transport_url", "fake://", "host_state")
    with HostStateStore.from_config(conf) as store:
        assert store.db.push is not None and store.db.push.kind == "fake"
    conf.set_override("push", False, "host_state")
    with HostStateStore.from_config(conf) as store:
        assert store.db.push is None


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_broker_is_said_once_and_lets_waiters_poll(caplog):
    """No broker listens: subscribing works (the waiter polls: ``live``
    is False), a writer's commit is not held up nor failed, and each side
    says so once however often it retries."""
    url = "rabbit://guest:guest@127.0.0.1:%d/" % _closed_port()
    with HostStateStore("sqlite://", push_transport_url=url) as store:
        sub = store.host_changes("h")
        assert isinstance(sub, notify.Subscription) and not sub.live
        for _ in range(3):
            started = time.monotonic()
            with store.db.write() as conn:
                store.db.wake(conn, [notify.host_channel("h")], "x")
            assert time.monotonic() - started < 5
        time.sleep(1.2)  # NOTE: the listener retried meanwhile
        said = [r.getMessage() for r in caplog.records if "127.0.0.1" in r.getMessage()]
        assert len([m for m in said if "cannot listen for changes" in m]) == 1
        assert len([m for m in said if "unavailable (publishing wake-ups" in m]) == 1
        assert all("guest:guest" not in m for m in said)
        sub.close()


def test_the_in_process_hub_is_shared_by_the_stores_of_one_database(tmp_path):
    """``fake://``: two store objects of the same file in one process (the
    demo's agents and scheduler) wake each other, after the commit only."""
    url = "sqlite:///%s" % (tmp_path / "s.sqlite")
    with HostStateStore(url, push_transport_url="fake://") as a, \
            HostStateStore(url, push_transport_url="fake://") as b:
        sub = a.host_changes("h")
        assert sub is not None and sub.live
        with pytest.raises(RuntimeError), b.db.write() as conn:
            b.db.wake(conn, [notify.host_channel("h")], "x")
            raise RuntimeError("rolled back")
        assert not sub.wait(0)
        with b.db.write() as conn:
            b.db.wake(conn, [notify.host_channel("h")], "x")
            assert not sub.wait(0)  # NOTE: not before the commit
        assert sub.wait(0)
        sub.close()


@pytest.mark.parametrize("url, why", [
    ("rabbit://guest:s3cr3t@127.0.0.1:notaport/", "port"),
    ("rabbit://guest:s3cr3t@127.0.0.1:99999/", "port"),
    ("rabbit://guest:s3cr3t@127.0.0.1:0/", "port"),
    # NOTE: a ',' in a password must be percent-encoded (%2C): unencoded,
    # it splits the hosts and the password's start reads as a port.
    ("rabbit://guest:s3cr,3t@127.0.0.1:5672/", "port"),
])
def test_a_bad_port_is_refused_when_the_store_opens_without_its_password(url, why):
    """Before: accepted, then retried forever as "broker unavailable" (the
    comma's password printed whole in that warning)."""
    with pytest.raises(ValueError) as err:
        HostStateStore("sqlite://", push_transport_url=url)
    message = str(err.value)
    assert message.startswith("[host_state] push_transport_url")
    assert why in message and "\n" not in message
    assert "s3cr" not in message and "3t@" not in message


@pytest.mark.parametrize("query, named", [
    ("heartbeat_timeout_threshold=30",
     "set [host_state] push_heartbeat_timeout_threshold instead"),
    ("ssl=1&sll_ca_file=/etc/ca.pem", "sll_ca_file"),
    ("ssl", "the query 'ssl' is not KEY=VALUE pairs"),
    ("ssl=1&ssl=0", "more than once"),
    ("ssl=maybe", "?ssl=maybe: expected true or false"),
    ("ssl=1&ssl_version=TLSv1_3", "ssl_version"),
])
def test_query_options_other_than_tls_are_refused_rather_than_ignored(query, named):
    """Only oslo.messaging's TLS options are understood in the query: any
    other (a typo that would connect in clear, an option of its driver that
    would be ignored here) is refused in one line, the password hidden."""
    with pytest.raises(ValueError) as err:
        HostStateStore("sqlite://",
                       push_transport_url="rabbit://guest:s3cr3t@127.0.0.1:5671/?" + query)
    message = str(err.value)
    assert named in message and "s3cr3t" not in message and "\n" not in message


@pytest.mark.parametrize("password", ["pa?ss", "pa#ss", "pa?ssl=xy", "pa?ssl=1&ssl_ca_file=xy"])
def test_a_password_with_an_unencoded_question_mark_or_hash_is_not_shown(password):
    """A '?' or '#' in a password ends the URL's hosts there: the rest of
    the password was read as the query or the fragment and shown in the
    error (the password hidden only up to it); it is said as such, with
    none of it (before: ``the query 'ss@127.0.0.1:5672/' is not ...``)."""
    with pytest.raises(ValueError) as err:
        broker.brokers("rabbit://guest:%s@127.0.0.1:5672/" % password)
    message = str(err.value)
    rest = password.replace("#", "?").split("?", 1)[1]
    assert rest + "@" not in message and "xy" not in message, message
    assert message.startswith("[host_state] push_transport_url "
                              "'rabbit://guest:***@127.0.0.1:5672/': "), message
    assert "a '?' or '#' in a password is percent-encoded" in message, message


def test_the_query_sets_tls_over_the_options_as_oslo_messaging_does(tmp_path):
    """``?ssl=1&ssl_ca_file=...`` overrides ``[host_state] push_ssl*`` (as
    the query overrides ``[oslo_messaging_rabbit]``); each broker's TLS
    names its own host, so that its certificate is checked against it."""
    ca = _ca_file(tmp_path)
    options = broker.TLS(enabled=False, ca_file="/nonexistent", version="tlsv1_2")
    found, tls = broker.brokers("rabbit://u:p@a:5671,u:p@b/?ssl=true&ssl_ca_file=%s" % ca,
                                options)
    assert [(b.host, b.port) for b in found] == [("a", 5671), ("b", 5672)]
    assert tls.enabled and tls.ca_file == str(ca) and tls.version == "tlsv1_2"
    assert tls.origin("ca_file") == "push_transport_url's ?ssl_ca_file"
    assert tls.origin("version") == "[host_state] push_ssl_version"
    params = tls.params("b")
    assert isinstance(params, dict)
    assert params["server_hostname"] == "b" and params["ca_certs"] == str(ca)
    assert params["cert_reqs"] == ssl.CERT_REQUIRED
    assert params["tls_minimum_version"] == params["tls_maximum_version"] == \
        ssl.TLSVersion.TLSv1_2
    assert broker.brokers("rabbit://u:p@a/?ssl=0", broker.TLS(enabled=True))[1].params("a") \
        is False


def test_an_empty_value_in_the_query_sets_nothing_as_oslo_messaging_does(tmp_path):
    """oslo.messaging drops a query key with an empty value (``parse_qs``),
    and the option applies: ``?ssl=1&ssl_ca_file=`` (as deployment
    templates leave it when no CA is given there) keeps ``[host_state]
    push_ssl_ca_file`` (before: the system's CAs, the broker's
    certificate refused); an empty segment is nothing."""
    ca = _ca_file(tmp_path)
    found, tls = broker.brokers("rabbit://u:p@a:5671/?ssl=1&ssl_ca_file=&ssl_version=&",
                                broker.TLS(ca_file=str(ca), version="TLSv1_2"))
    assert tls.enabled and tls.ca_file == str(ca) and tls.version == "TLSv1_2"
    assert tls.origin("ca_file") == "[host_state] push_ssl_ca_file"
    assert broker.brokers("rabbit://u:p@a/?ssl=", broker.TLS(enabled=True))[1].enabled


def _ca_file(tmp_path):
    from tests.servers import make_tls_files

    return make_tls_files(tmp_path).ca


@pytest.mark.parametrize("settings, named", [
    ({"ca_file": "{missing}"}, "[host_state] push_ssl_ca_file {missing}: not a readable"),
    ({"ca_file": "{garbage}"}, "[host_state] push_ssl_ca_file {garbage}: not a readable"),
    ({"cert_file": "{ca}", "key_file": "{other_key}"},
     "[host_state] push_ssl_cert_file {ca} with [host_state] push_ssl_key_file"),
    ({"key_file": "{other_key}"}, "push_ssl_key_file {other_key}: a key without its "
     "certificate"),
    ({"version": "TLSv1_3"}, "[host_state] push_ssl_version 'TLSv1_3': expected one of"),
])
def test_tls_files_that_do_not_load_stop_a_process_naming_option_and_file(
        tmp_path, settings, named):
    """Checked when the process opens its store from its configuration,
    before any broker is asked: a configuration error (the command's exit
    2, one line), not a warning repeated at every reconnection."""
    from tests.servers import make_tls_files

    files = make_tls_files(tmp_path)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    names = {"missing": str(tmp_path / "missing.pem"), "garbage": str(garbage),
             "ca": str(files.ca), "other_key": str(files.other_client_key)}
    conf = _conf("rabbit://guest:s3cr3t@127.0.0.1:%d/" % _closed_port())
    conf.set_override("push_ssl", True, "host_state")
    for field, value in settings.items():
        conf.set_override(broker.TLS.OPTIONS[field], value.format(**names), "host_state")
    with pytest.raises(exception.ConfigError) as err:
        HostStateStore.from_config(conf)
    message = str(err.value)
    assert named.format(**names) in message, message
    assert "\n" not in message and "s3cr3t" not in message


def test_tls_options_are_unused_without_tls():
    """As oslo.messaging: ``push_ssl_*`` files are read only with ``push_ssl``."""
    conf = _conf("rabbit://guest:guest@127.0.0.1:%d/" % _closed_port())
    conf.set_override("push_ssl_ca_file", "/nonexistent.pem", "host_state")
    with HostStateStore.from_config(conf) as store:
        assert isinstance(store.db.push, broker.BrokerPush)


def test_a_password_with_a_comma_is_hidden_whole():
    assert "ssword" not in broker.redacted("rabbit://guest:pa,ssword@127.0.0.1:5672/")
    assert broker.redacted("rabbit://guest:pa/ss@h:5672/v") == "rabbit://guest:***@h:5672/v"
    assert broker.redacted("rabbit://u:p%2Cq@a:5672,v:w@[::1]:5672/vh") == \
        "rabbit://u:***@a:5672,v:***@[::1]:5672/vh"


def test_ipv6_and_default_ports_are_kept():
    assert broker.broker_urls("rabbit://u:p@[::1]:5673,u:p@h/") == [
        "pyamqp://u:p@[::1]:5673/%2F", "pyamqp://u:p@h/%2F"]


def _conf(transport_url: str) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    conf.set_override("connection", "sqlite://", "host_state")
    conf.set_override("push_transport_url", transport_url, "host_state")
    return conf


def test_a_bad_url_in_the_configuration_is_a_configuration_error():
    """A command says ``error: [host_state] push_transport_url ...``, not
    "unexpected error (a bug)" (before: a ValueError)."""
    with pytest.raises(exception.ConfigError) as err:
        HostStateStore.from_config(_conf("rabbit://guest:s3cr3t@127.0.0.1:nope/"))
    assert str(err.value).startswith("[host_state] push_transport_url")
    assert "s3cr3t" not in str(err.value)


def test_fake_in_the_configuration_warns_that_other_processes_wake_nobody(caplog):
    """A process opened from the configuration (a service, a command) with
    ``fake://`` is woken only by its own writes: said, not silent (its
    waiters see another process's change at the safety net only)."""
    with HostStateStore.from_config(_conf("fake://")) as store:
        assert store.db.push is not None and store.db.push.kind == "fake"
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("fake://" in m and "push_safety_poll_interval" in m for m in said), said


@pytest.fixture
def silent_broker():
    """A "broker" that accepts connections and never answers (hung, or
    behind a firewall that drops its packets): what times out instead of
    being refused."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield "rabbit://guest:guest@127.0.0.1:%d/" % server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_silent_broker_holds_up_neither_waiters_nor_close(tmp_path, silent_broker):
    """Subscribing never waits for the broker (the waiter polls until the
    listener's thread connects), nor does a writer, and closing the store
    waits for one connection attempt at most (before: the first subscribe
    took 10 s, a later one up to 10 s while the listener reconnected, and
    close 30 s)."""
    url = "sqlite:///%s" % (tmp_path / "s.sqlite")
    store = HostStateStore(url, push_transport_url=silent_broker)
    try:
        started = time.monotonic()
        sub = store.host_changes("h")
        assert sub is not None and not sub.live
        assert time.monotonic() - started < 2
        with store.db.write() as conn:
            store.db.wake(conn, [notify.host_channel("h")], "x")
        assert time.monotonic() - started < 2
        time.sleep(1.0)  # NOTE: the listener's thread is connecting meanwhile
        started = time.monotonic()
        other = store.host_changes("h2")
        assert other is not None and not other.live
        assert time.monotonic() - started < 2
        sub.close()
        other.close()
    finally:
        started = time.monotonic()
        store.close()
        closing = time.monotonic() - started
    assert closing < broker.CONNECT_TIMEOUT + 3


def test_a_certificate_for_another_name_says_which_host_the_url_must_name():
    """Each broker's certificate must name the host its URL names (the
    TLS handshake's error, as kombu wraps it, read to its cause)."""
    found, tls = broker.brokers("rabbit://u:p@10.0.0.5:5671/?ssl=1")
    cause = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cause.verify_message = "IP address mismatch, certificate is not valid for '10.0.0.5'."
    wrapped = OSError("kombu's")
    wrapped.__cause__ = cause
    why = broker.explain(wrapped, found[0], tls)
    assert why == (
        "broker 10.0.0.5:5671: its certificate does not name 10.0.0.5 (IP address mismatch, "
        "certificate is not valid for '10.0.0.5'.); the host in [host_state] "
        "push_transport_url must be one the certificate names")
    assert broker.explain(ConnectionRefusedError(111, "refused"), found[0], tls) is None


def test_the_start_check_waits_for_one_broker_s_time_whatever_their_number(
        tmp_path, silent_broker, monkeypatch, caplog):
    """A store opened from its configuration checks its broker within
    ``CONNECT_TIMEOUT + IO_TIMEOUT`` seconds in all, as its docstring says,
    however many brokers the URL lists: those it had no time for are tried
    by the publisher and the listener later, the waiters polling meanwhile
    (before: every broker in turn, ``CONNECT_TIMEOUT`` or more each, at
    the start of every command and service: 15 s for three silent ones)."""
    monkeypatch.setattr(broker, "CONNECT_TIMEOUT", 0.5)
    monkeypatch.setattr(broker, "IO_TIMEOUT", 0.5)
    host = silent_broker.split("//", 1)[1].rstrip("/")
    conf = _conf("rabbit://%s/" % ",".join([host] * 8))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING), HostStateStore.from_config(conf) as store:
        waited = time.monotonic() - started
        assert store.db.push is not None
    assert waited < 2.5, waited
    assert "unavailable (connecting" in caplog.text
    assert "guest:guest" not in caplog.text


def test_the_heartbeat_options_reach_the_broker_connections():
    """``[host_state] push_heartbeat_timeout_threshold`` and
    ``push_heartbeat_rate`` (oslo.messaging's ``heartbeat_*``, same
    defaults) are the store's broker heartbeat; checked every threshold /
    rate / 2 seconds, as oslo.messaging's driver (0: none)."""
    url = "rabbit://guest:guest@127.0.0.1:%d/" % _closed_port()
    with HostStateStore.from_config(_conf(url)) as store:
        assert isinstance(store.db.push, broker.BrokerPush)
        assert store.db.push.heartbeat == broker.Heartbeat(60, 3)
    conf = _conf(url)
    conf.set_override("push_heartbeat_timeout_threshold", 12, "host_state")
    conf.set_override("push_heartbeat_rate", 2, "host_state")
    with HostStateStore.from_config(conf) as store:
        assert isinstance(store.db.push, broker.BrokerPush)
        assert store.db.push.heartbeat == broker.Heartbeat(12, 2)
        assert store.db.push.heartbeat.interval == 3.0
    assert broker.Heartbeat(0, 3).interval is None
