// QueueSetup: an I/O queue's connection set-up as a state machine on its reactor (see the
// header). Everything here runs on the reactor's thread.
#include "host/queue_setup.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

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
  fd_ = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0)
    return fail("I/O queue " + std::to_string(qo_.qid) + ": socket: " + std::strerror(errno));
  if (connect(fd_, reinterpret_cast<sockaddr*>(&ss), len) == 0) return tcp_connected();
  if (errno != EINPROGRESS)
    return fail("I/O queue " + std::to_string(qo_.qid) + ": connect: " + std::strerror(errno));
  watch(EPOLLOUT);
}

void QueueSetup::on_event(uint32_t) {
  if (step_ == Step::kTcpConnect) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == EINPROGRESS) return;
    if (err != 0)
      return fail("I/O queue " + std::to_string(qo_.qid) + ": connect: " + std::strerror(err));
    tcp_connected();
  } else if (step_ == Step::kTls) {
    tls_step();
  }
}

void QueueSetup::tcp_connected() {
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (!qo_.tls) return begin_queue();
  step_ = Step::kTls;
  tls_ = std::make_unique<transport::TlsChannel>(*qo_.tls, fd_);
  tls_step();
}

void QueueSetup::tls_step() {
  using Io = transport::TlsChannel::Io;
  const Io io = tls_->handshake();
  if (io == Io::kOk) return begin_queue();
  if (io == Io::kWantRead || io == Io::kWantWrite)
    return watch(io == Io::kWantRead ? EPOLLIN : EPOLLOUT);
  fail("I/O queue " + std::to_string(qo_.qid) + ": " + tls_handshake_error(*tls_));
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
