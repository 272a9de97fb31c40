#pragma once
// `sens target` as a systemd service (Type=notify): the state changes systemd waits for,
// sent with sd_notify(3) to $NOTIFY_SOCKET. Without that variable (not started by systemd)
// every call here does nothing. Nothing here runs on a reactor: the signal thread only.
#include <string>

namespace sens::target {
class Target;
}

namespace sens::tools::service {

// Whether this binary can notify (built with libsystemd) and systemd asked for it. Warns
// once when NOTIFY_SOCKET is set but support was not built in.
bool notifying();
// Waits until every reactor has run a task posted to it (the loops turn); false on timeout.
bool reactors_running(target::Target& t, int timeout_ms);
// "listening on ...; N namespaces in M subsystems": the STATUS= line of READY=1.
std::string status_line(target::Target& t);
// READY=1 with STATUS=`status`: at start, and when a reload is over.
void ready(const std::string& status);
// RELOADING=1 (with MONOTONIC_USEC, which systemd 253+ expects): a SIGHUP re-read begins.
void reloading();
// STOPPING=1: SIGTERM/SIGINT arrived; the target stops accepting and drains.
void stopping(const std::string& status);

}  // namespace sens::tools::service
