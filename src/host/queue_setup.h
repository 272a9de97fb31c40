#pragma once
// Bringing one library I/O queue up without blocking the thread that drives its reactor: a
// non-blocking connect(), the TLS handshake, ICReq/ICResp, Fabrics Connect and DH-HMAC-CHAP,
// each step advanced by the reactor when its socket is ready or its command completes, so a
// poller that reconnects one queue keeps running every other (issue 32). The deadlines are the
// blocking set-up's: connect_timeout for TCP, TLS and ICResp together, admin_timeout (+1 s,
// as Controller::wait_command) for each command; a step that misses its deadline fails the
// set-up.
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host/controller.h"
#include "host/queue.h"
#include "reactor/reactor.h"
#include "transport/tls.h"

namespace sens::host {

class QueueSetup final : public EventHandler {
 public:
  enum class Step : uint8_t {
    kIdle,
    kTcpConnect,  // connect() in progress: waiting for the socket to be writable
    kTls,         // TLS 1.3 handshake
    kIcResp,      // ICReq sent
    kConnect,     // Fabrics Connect sent
    kAuth,        // DH-HMAC-CHAP
    kDone,        // take() the open queue
    kFailed,      // error() says why
  };
  // `on_finished(ctx)` runs on the reactor's thread once the set-up is kDone or kFailed, from
  // inside a reactor callback: it must not destroy the set-up (note it, act later).
  QueueSetup(Reactor& reactor, Controller& ctrl, const QueueOptions& qo, uint32_t incapsule,
             void (*on_finished)(void* ctx), void* ctx);
  ~QueueSetup() override;  // abandons the set-up (the socket closes); no callback after
  QueueSetup(const QueueSetup&) = delete;
  QueueSetup& operator=(const QueueSetup&) = delete;

  // Starts connecting to the controller's address (the reactor's thread).
  void start();
  // Where DH-HMAC-CHAP's DH exchange runs (up to ~0.4 s of CPU with ffdhe8192): `run(job)`
  // runs the job on another thread, which hands its result back through this reactor. Unset:
  // on this thread (a set-up that is waited for anyway).
  using Offload = std::function<void(std::function<void()>)>;
  void set_offload(Offload run) { offload_ = std::move(run); }
  Step step() const { return step_; }
  bool finished() const { return step_ == Step::kDone || step_ == Step::kFailed; }
  const std::string& error() const { return error_; }
  // kDone: the open queue, Connect (and authentication) done; its observers are unset.
  std::unique_ptr<Queue> take();

 private:
  void on_event(uint32_t events) override;
  void tcp_connected();
  void tls_step();
  void begin_queue();
  static void on_queue_open(void* ctx, Queue& q);
  static void on_queue_failure(void* ctx, Queue& q);
  static void on_command_done(void* ctx, uint64_t tag, const Completion& c);
  void command_done(const Completion& c);
  // Sends one command on the queue (its data stays in `data_`) with its own deadline.
  void send_command(const nvme::Sqe& sqe, DataDir dir, uint32_t len);
  void send_auth(DhchapExchange::Step s);
  void receive_auth();
  void challenge_offloaded(const Completion& c);
  void fail(const std::string& why);
  void finish(Step s);
  void arm(Nanos deadline);
  void watch(uint32_t events);  // the socket, while the set-up drives it (TCP, TLS)

  // What the authentication is waiting for.
  enum class AuthWait : uint8_t {
    kNegotiateSent,
    kChallenge,
    kReplySent,
    kSuccess1,
    kLastSent,
    kRefusalSent
  };

  Reactor& reactor_;
  Controller& ctrl_;
  QueueOptions qo_;
  uint32_t incapsule_;
  void (*on_finished_)(void*);
  void* ctx_;
  Step step_ = Step::kIdle;
  std::string error_;
  int fd_ = -1;  // until the queue takes it
  bool watching_ = false;
  std::unique_ptr<transport::TlsChannel> tls_;
  std::unique_ptr<Queue> queue_;
  Timer deadline_;
  std::vector<uint8_t> data_;             // the command in flight's data (Connect, AUTH_*)
  std::shared_ptr<DhchapExchange> auth_;  // shared with an offloaded step
  Offload offload_;
  // An offloaded step's way back: null once the set-up is gone (under mu).
  struct Handoff {
    std::mutex mu;
    QueueSetup* setup = nullptr;
  };
  std::shared_ptr<Handoff> handoff_;
  AuthWait auth_wait_ = AuthWait::kNegotiateSent;
  std::string refusal_;  // the host refused: the error once FAILURE2 is sent
};

const char* queue_setup_step_name(QueueSetup::Step s);

}  // namespace sens::host
