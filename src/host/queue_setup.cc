// A queue's connection set-up, both ways: Queue::open() blocks on each step with poll() (the
// admin queue, a caller that waits anyway); QueueSetup is the same steps as a state machine on
// its reactor (see the header), everything of it on the reactor's thread.
#include "host/queue_setup.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "host/trid.h"
#include "wire/nvme_auth.h"

namespace sens::host {

std::string tls_handshake_error(const transport::TlsChannel& tls) {
  std::string why = tls.error();
  if (why.find("alert handshake failure") != std::string::npos)
    why += " (the target knows no PSK for this identity: wrong key, host or subsystem?)";
  return why;
}

namespace {

// ---- the steps both set-ups take ----

// Starts a non-blocking TCP connect(): "" and *fd (*connected if it completed at once), or
// what failed ("socket: ..." or "connect: ...") with nothing left open.
std::string start_connect(const sockaddr* addr, socklen_t addr_len, int* fd, bool* connected) {
  *fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (*fd < 0) return std::string("socket: ") + std::strerror(errno);
  *connected = connect(*fd, addr, addr_len) == 0;
  if (*connected || errno == EINPROGRESS) return {};
  const int err = errno;
  ::close(*fd);
  *fd = -1;
  return std::string("connect: ") + std::strerror(err);
}

// A connect() in progress, once its socket is writable: 0, EINPROGRESS, or why it failed.
int connect_result(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  return err;
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails on socketpairs: fine
}

enum class HandshakeWait : uint8_t { kNothing, kReadable, kWritable, kFailed };

// One step of the TLS handshake: kNothing once it is complete, the socket readiness it waits
// for, or kFailed with *error saying why.
HandshakeWait tls_handshake_step(transport::TlsChannel& tls, std::string* error) {
  using Io = transport::TlsChannel::Io;
  const Io io = tls.handshake();
  if (io == Io::kOk) return HandshakeWait::kNothing;
  if (io == Io::kWantRead) return HandshakeWait::kReadable;
  if (io == Io::kWantWrite) return HandshakeWait::kWritable;
  *error = tls_handshake_error(tls);
  return HandshakeWait::kFailed;
}

}  // namespace

// ---- the blocking set-up: Queue::open() ----

std::string Queue::open(const sockaddr* addr, socklen_t addr_len, Nanos deadline) {
  int fd = -1;
  bool connected = false;
  if (std::string e = start_connect(addr, addr_len, &fd, &connected); !e.empty()) return e;
  if (!connected) {
    // Connection set-up is not the data path: a plain poll() bounded by the deadline.
    pollfd p{fd, POLLOUT, 0};
    Nanos left = deadline - reactor_.now();
    int r = poll(&p, 1, int(std::max<Nanos>(left, 0) / kMilli));
    if (r <= 0) {
      const int err = errno;
      ::close(fd);
      return r == 0 ? "connect: timed out" : std::string("connect: ") + std::strerror(err);
    }
    if (int err = connect_result(fd); err != 0) {
      ::close(fd);
      return std::string("connect: ") + std::strerror(err);
    }
  }
  return open_fd(fd, deadline);
}

std::string Queue::open_fd(int fd, Nanos deadline) {
  if (state_ != State::kIdle) {
    ::close(fd);
    return "queue already opened";
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  set_nodelay(fd);
  std::unique_ptr<transport::TlsChannel> tls;
  if (options_.tls) {
    // TLS 1.3 first (NVMe/TCP 1.1). The blocking form: a poll() loop to the deadline.
    tls = std::make_unique<transport::TlsChannel>(*options_.tls, fd);
    std::string why;
    for (;;) {
      const HandshakeWait wait = tls_handshake_step(*tls, &why);
      if (wait == HandshakeWait::kNothing) break;
      if (wait == HandshakeWait::kFailed) {
        ::close(fd);
        return why;
      }
      pollfd p{fd, short(wait == HandshakeWait::kReadable ? POLLIN : POLLOUT), 0};
      const Nanos left = deadline - reactor_.now();
      if (left <= 0 || poll(&p, 1, int(std::max<Nanos>(left / kMilli, 1))) <= 0) {
        ::close(fd);
        return "TLS handshake: no answer before the connect timeout";
      }
    }
  }
  if (std::string e = begin(fd, std::move(tls)); !e.empty()) return e;
  while (state_ == State::kIcWait && reactor_.now() < deadline)
    reactor_.run_once(std::min<Nanos>(deadline - reactor_.now(), 10 * kMilli));
  if (state_ == State::kIcWait) fail("no ICResp before the connect timeout");
  return state_ == State::kOpen ? std::string() : error_;
}

// ---- the non-blocking set-up: QueueSetup ----

const char* queue_setup_step_name(QueueSetup::Step s) {
  switch (s) {
    case QueueSetup::Step::kIdle:
      return "idle";
    case QueueSetup::Step::kTcpConnect:
      return "tcp-connect";
    case QueueSetup::Step::kTls:
      return "tls";
    case QueueSetup::Step::kIcResp:
      return "icresp";
    case QueueSetup::Step::kConnect:
      return "fabrics-connect";
    case QueueSetup::Step::kAuth:
      return "dh-hmac-chap";
    case QueueSetup::Step::kDone:
      return "done";
    case QueueSetup::Step::kFailed:
      return "failed";
  }
  return "?";
}

QueueSetup::QueueSetup(Reactor& reactor, Controller& ctrl, const QueueOptions& qo,
                       uint32_t incapsule, void (*on_finished)(void*), void* ctx)
    : reactor_(reactor),
      ctrl_(ctrl),
      qo_(qo),
      incapsule_(incapsule),
      on_finished_(on_finished),
      ctx_(ctx),
      deadline_([this] {
        const std::string q = std::to_string(qo_.qid);
        const std::string ms = std::to_string((ctrl_.admin_timeout() + kSecond) / kMilli);
        switch (step_) {
          case Step::kTcpConnect:
            return fail("I/O queue " + q + ": connect: timed out");
          case Step::kTls:
            return fail("I/O queue " + q + ": TLS handshake: no answer before the connect timeout");
          case Step::kIcResp:
            return fail("I/O queue " + q + ": no ICResp before the connect timeout");
          case Step::kConnect:
            return fail("Connect qid " + q + " to " + ctrl_.trid().subnqn + ": no answer within " +
                        ms + " ms");
          default:
            return fail("DH-HMAC-CHAP on qid " + q + ": no answer within " + ms + " ms");
        }
      }) {}

QueueSetup::~QueueSetup() {
  step_ = Step::kFailed;  // what the queue's close calls back with is ignored
  if (handoff_) {
    std::lock_guard<std::mutex> g(handoff_->mu);
    handoff_->setup = nullptr;  // an offloaded step's result goes nowhere
  }
  reactor_.cancel(deadline_);
  if (queue_) {
    queue_->set_on_open(nullptr, nullptr);
    queue_->set_on_failure(nullptr, nullptr);
    queue_.reset();
  }
  if (fd_ >= 0) {
    if (watching_) reactor_.remove(fd_, this);
    ::close(fd_);
  }
}

void QueueSetup::arm(Nanos deadline) {
  reactor_.arm(deadline_, deadline);
}

void QueueSetup::watch(uint32_t events) {
  if (watching_)
    reactor_.modify(fd_, events, this);
  else
    reactor_.add(fd_, events, this);
  watching_ = true;
}

void QueueSetup::start() {
  sockaddr_storage ss;
  socklen_t len;
  if (!trid_sockaddr(ctrl_.trid(), &ss, &len)) return fail("bad address " + ctrl_.trid().traddr);
  arm(reactor_.now() + ctrl_.connect_timeout());  // TCP, TLS and ICResp together
  step_ = Step::kTcpConnect;
  bool connected = false;
  if (std::string e = start_connect(reinterpret_cast<sockaddr*>(&ss), len, &fd_, &connected);
      !e.empty())
    return fail("I/O queue " + std::to_string(qo_.qid) + ": " + e);
  if (connected) return tcp_connected();
  watch(EPOLLOUT);
}

void QueueSetup::on_event(uint32_t) {
  if (step_ == Step::kTcpConnect) {
    const int err = connect_result(fd_);
    if (err == EINPROGRESS) return;
    if (err != 0)
      return fail("I/O queue " + std::to_string(qo_.qid) + ": connect: " + std::strerror(err));
    tcp_connected();
  } else if (step_ == Step::kTls) {
    tls_step();
  }
}

void QueueSetup::tcp_connected() {
  set_nodelay(fd_);
  if (!qo_.tls) return begin_queue();
  step_ = Step::kTls;
  tls_ = std::make_unique<transport::TlsChannel>(*qo_.tls, fd_);
  tls_step();
}

void QueueSetup::tls_step() {
  std::string why;
  const HandshakeWait wait = tls_handshake_step(*tls_, &why);
  if (wait == HandshakeWait::kNothing) return begin_queue();
  if (wait == HandshakeWait::kFailed)
    return fail("I/O queue " + std::to_string(qo_.qid) + ": " + why);
  watch(wait == HandshakeWait::kReadable ? EPOLLIN : EPOLLOUT);
}

void QueueSetup::begin_queue() {
  if (watching_) reactor_.remove(fd_, this);
  watching_ = false;
  step_ = Step::kIcResp;
  queue_ = std::make_unique<Queue>(reactor_, qo_);
  queue_->set_on_open(&QueueSetup::on_queue_open, this);
  queue_->set_on_failure(&QueueSetup::on_queue_failure, this);
  const int fd = fd_;
  fd_ = -1;  // the queue's now
  if (std::string e = queue_->begin(fd, std::move(tls_)); !e.empty())
    fail("I/O queue " + std::to_string(qo_.qid) + ": " + e);
}

void QueueSetup::on_queue_open(void* ctx, Queue&) {
  auto* self = static_cast<QueueSetup*>(ctx);
  if (self->step_ != Step::kIcResp) return;
  self->step_ = Step::kConnect;
  nvme::ConnectData d;
  const nvme::Sqe sqe = self->ctrl_.connect_command(self->qo_.qid, self->qo_.depth, &d);
  const auto* p = reinterpret_cast<const uint8_t*>(&d);
  self->data_.assign(p, p + sizeof d);
  self->send_command(sqe, DataDir::kHostToController, sizeof d);
}

void QueueSetup::on_queue_failure(void* ctx, Queue& q) {
  auto* self = static_cast<QueueSetup*>(ctx);
  self->fail("I/O queue " + std::to_string(q.qid()) + ": " + q.error());
}

void QueueSetup::send_command(const nvme::Sqe& sqe, DataDir dir, uint32_t len) {
  // One command at a time, cid 0 on a queue of caller-chosen cids (as wait_command).
  iovec iov{data_.data(), len};
  const int cid = queue_->external_cids() ? 0 : -1;
  if (!queue_->submitv(sqe, &iov, len ? 1 : 0, len, dir, &QueueSetup::on_command_done, this, 0,
                       cid))
    return fail("I/O queue " + std::to_string(qo_.qid) + ": could not send a set-up command" +
                (queue_->error().empty() ? "" : ": " + queue_->error()));
  arm(reactor_.now() + ctrl_.admin_timeout() + kSecond);
}

void QueueSetup::on_command_done(void* ctx, uint64_t, const Completion& c) {
  auto* self = static_cast<QueueSetup*>(ctx);
  if (!self->finished()) self->command_done(c);
}

void QueueSetup::command_done(const Completion& c) {
  reactor_.cancel(deadline_);
  if (step_ == Step::kConnect) {
    bool authenticate = false;
    if (std::string e = ctrl_.connect_answer(qo_.qid, c, *queue_, &authenticate); !e.empty())
      return fail(e);
    if (!authenticate) return finish(Step::kDone);
    step_ = Step::kAuth;
    auth_ = std::make_shared<DhchapExchange>(ctrl_, qo_.qid);
    auth_wait_ = AuthWait::kNegotiateSent;
    return send_auth(auth_->negotiate());
  }
  switch (auth_wait_) {
    case AuthWait::kNegotiateSent:
    case AuthWait::kReplySent:
      if (!c.ok()) return fail(auth_->send_failed(c));
      auth_wait_ =
          auth_wait_ == AuthWait::kNegotiateSent ? AuthWait::kChallenge : AuthWait::kSuccess1;
      return receive_auth();
    case AuthWait::kChallenge:
      auth_wait_ = AuthWait::kReplySent;
      if (offload_) return challenge_offloaded(c);
      return send_auth(auth_->on_challenge(c, data_.data()));
    case AuthWait::kSuccess1: {
      DhchapExchange::Step s = auth_->on_success1(c, data_.data());
      if (s.error.empty() && s.send.empty()) break;  // unidirectional: done
      auth_wait_ = AuthWait::kLastSent;
      return send_auth(std::move(s));
    }
    case AuthWait::kLastSent:
      if (!c.ok()) return fail(auth_->send_failed(c));
      break;
    case AuthWait::kRefusalSent:
      return fail(refusal_);  // whatever became of FAILURE2
  }
  auth_->finished();
  finish(Step::kDone);
}

void QueueSetup::send_auth(DhchapExchange::Step s) {
  if (!s.error.empty()) {
    if (s.send.empty()) return fail(s.error);
    refusal_ = std::move(s.error);
    auth_wait_ = AuthWait::kRefusalSent;
  }
  data_ = std::move(s.send);
  const uint32_t len = uint32_t(data_.size());
  send_command(nvme::auth::make_auth_send(len, nvme::Xfer::kInCapsule), DataDir::kHostToController,
               len);
}

void QueueSetup::challenge_offloaded(const Completion& c) {
  // The reply's DH exchange on another thread; its Step comes back through this reactor's
  // mailbox, to this set-up if it still exists (the handoff outlives it).
  if (!handoff_) {
    handoff_ = std::make_shared<Handoff>();
    handoff_->setup = this;
  }
  struct Job {
    std::shared_ptr<DhchapExchange> auth;
    std::shared_ptr<Handoff> handoff;
    Completion c;
    std::vector<uint8_t> msg;
    DhchapExchange::Step step;
  };
  auto job = std::make_shared<Job>(Job{auth_, handoff_, c, data_, {}});
  offload_([job] {
    job->step = job->auth->on_challenge(job->c, job->msg.data());
    std::lock_guard<std::mutex> g(job->handoff->mu);
    // Set-up alive: so is its reactor (it goes after the set-up, which clears this first).
    if (QueueSetup* s = job->handoff->setup)
      s->reactor_.post([job] {
        QueueSetup* self = nullptr;
        {
          std::lock_guard<std::mutex> g2(job->handoff->mu);
          self = job->handoff->setup;
        }
        if (self && !self->finished()) self->send_auth(std::move(job->step));
      });
  });
}

void QueueSetup::receive_auth() {
  data_.assign(DhchapExchange::kReceiveBytes, 0);
  send_command(nvme::auth::make_auth_receive(DhchapExchange::kReceiveBytes),
               DataDir::kControllerToHost, DhchapExchange::kReceiveBytes);
}

void QueueSetup::fail(const std::string& why) {
  if (finished()) return;
  error_ = why;
  finish(Step::kFailed);
}

void QueueSetup::finish(Step s) {
  step_ = s;
  reactor_.cancel(deadline_);
  if (s == Step::kDone) queue_->set_incapsule_limit(incapsule_);
  if (on_finished_) on_finished_(ctx_);
}

std::unique_ptr<Queue> QueueSetup::take() {
  if (step_ != Step::kDone || !queue_) return nullptr;
  queue_->set_on_open(nullptr, nullptr);
  queue_->set_on_failure(nullptr, nullptr);
  return std::move(queue_);
}

}  // namespace sens::host
