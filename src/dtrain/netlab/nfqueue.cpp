#include "dtrain/netlab/nfqueue.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace dtrain::netlab {
namespace {

constexpr size_t kAlign = 4;  // NLMSG_ALIGNTO == NLA_ALIGNTO

size_t aligned(size_t n) {
  return (n + kAlign - 1) & ~(kAlign - 1);
}

// A netlink message under construction: header, nfgenmsg, attributes.
class Message {
 public:
  Message(uint8_t type, uint16_t queue, uint16_t flags) : bytes_(NLMSG_HDRLEN) {
    auto* h = reinterpret_cast<nlmsghdr*>(bytes_.data());
    h->nlmsg_type = static_cast<uint16_t>((NFNL_SUBSYS_QUEUE << 8) | type);
    h->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
    nfgenmsg g{};
    g.nfgen_family = AF_UNSPEC;
    g.version = NFNETLINK_V0;
    g.res_id = htons(queue);
    append(&g, sizeof(g));
  }
  template <typename T>
  Message& attribute(uint16_t type, const T& value) {
    nlattr a{};
    a.nla_len = static_cast<uint16_t>(NLA_HDRLEN + sizeof(T));
    a.nla_type = type;
    append(&a, sizeof(a));
    append(&value, sizeof(T));
    return *this;
  }
  const std::vector<char>& bytes() {
    reinterpret_cast<nlmsghdr*>(bytes_.data())->nlmsg_len = static_cast<uint32_t>(bytes_.size());
    return bytes_;
  }

 private:
  void append(const void* data, size_t n) {
    const size_t at = bytes_.size();
    bytes_.resize(at + aligned(n), 0);
    std::memcpy(bytes_.data() + at, data, n);
  }
  std::vector<char> bytes_;
};

std::string errno_text(int error) {
  return std::strerror(error);
}

}  // namespace

NfQueue::NfQueue(uint16_t number, bool whole_gso_packets) : number_(number), buffer_(1 << 16) {
  fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_NETFILTER);
  if (fd_ < 0) throw std::runtime_error("nfqueue: netlink socket: " + errno_text(errno));
  // Room for bursts: a full buffer makes the kernel drop the packets it cannot report.
  const int bytes = 8 << 20;
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes));
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    const int e = errno;
    close(fd_);
    throw std::runtime_error("nfqueue: bind: " + errno_text(e));
  }
  try {
    nfqnl_msg_config_cmd bind_cmd{};
    bind_cmd.command = NFQNL_CFG_CMD_BIND;
    send(Message(NFQNL_MSG_CONFIG, number_, NLM_F_ACK).attribute(NFQA_CFG_CMD, bind_cmd).bytes());
    expect_ack("bind queue " + std::to_string(number_));
    nfqnl_msg_config_params params{};
    params.copy_range = htonl(0);
    params.copy_mode = NFQNL_COPY_META;  // ids only: the payload is never looked at
    const uint32_t max_len = htonl(1 << 16);
    const uint32_t flags = htonl(whole_gso_packets ? NFQA_CFG_F_GSO : 0);
    const uint32_t mask = htonl(NFQA_CFG_F_GSO);
    send(Message(NFQNL_MSG_CONFIG, number_, NLM_F_ACK)
             .attribute(NFQA_CFG_PARAMS, params)
             .attribute(NFQA_CFG_QUEUE_MAXLEN, max_len)
             .attribute(NFQA_CFG_FLAGS, flags)
             .attribute(NFQA_CFG_MASK, mask)
             .bytes());
    expect_ack("configure queue " + std::to_string(number_));
  } catch (...) {
    close(fd_);
    throw;
  }
}

NfQueue::~NfQueue() {
  if (fd_ >= 0) close(fd_);
}

void NfQueue::send(const std::vector<char>& message) const {
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  for (;;) {
    const ssize_t n = sendto(fd_, message.data(), message.size(), 0,
                             reinterpret_cast<const sockaddr*>(&kernel), sizeof(kernel));
    if (n == static_cast<ssize_t>(message.size())) return;
    if (n < 0 && errno == EINTR) continue;
    throw std::runtime_error("nfqueue: send: " + errno_text(errno));
  }
}

// Waits (briefly: the kernel answers at once) for the acknowledgement of a config message.
void NfQueue::expect_ack(const std::string& what) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const ssize_t n = recv(fd_, buffer_.data(), buffer_.size(), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      usleep(1000);
      continue;
    }
    if (n < 0) throw std::runtime_error("nfqueue: " + what + ": " + errno_text(errno));
    auto* h = reinterpret_cast<nlmsghdr*>(buffer_.data());
    for (size_t left = static_cast<size_t>(n); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type != NLMSG_ERROR) continue;
      const int error = -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
      if (error == 0) return;
      throw std::runtime_error("nfqueue: " + what + ": " + errno_text(error) +
                               (error == EBUSY ? " (another process holds this queue)" : ""));
    }
  }
  throw std::runtime_error("nfqueue: " + what + ": the kernel did not answer");
}

bool NfQueue::receive(std::vector<uint32_t>& ids) {
  bool complete = true;
  for (;;) {
    const ssize_t n = recv(fd_, buffer_.data(), buffer_.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOBUFS) {
      complete = false;
      continue;
    }
    if (n < 0 && errno == EAGAIN) return complete;
    if (n <= 0) throw std::runtime_error("nfqueue: receive: " + errno_text(errno));
    auto* h = reinterpret_cast<nlmsghdr*>(buffer_.data());
    for (size_t left = static_cast<size_t>(n); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if ((h->nlmsg_type & 0xff) != NFQNL_MSG_PACKET) continue;
      const size_t header = NLMSG_HDRLEN + aligned(sizeof(nfgenmsg));
      if (h->nlmsg_len < header) continue;
      const char* at = reinterpret_cast<const char*>(h) + header;
      size_t attrs = h->nlmsg_len - header;
      while (attrs >= NLA_HDRLEN) {
        const auto* a = reinterpret_cast<const nlattr*>(at);
        if (a->nla_len < NLA_HDRLEN || a->nla_len > attrs) break;
        if ((a->nla_type & NLA_TYPE_MASK) == NFQA_PACKET_HDR &&
            a->nla_len >= NLA_HDRLEN + sizeof(nfqnl_msg_packet_hdr)) {
          nfqnl_msg_packet_hdr packet{};
          std::memcpy(&packet, at + NLA_HDRLEN, sizeof(packet));
          ids.push_back(ntohl(packet.packet_id));
          break;
        }
        const size_t step = aligned(a->nla_len);
        if (step >= attrs) break;
        at += step;
        attrs -= step;
      }
    }
  }
}

void NfQueue::verdict(uint32_t id, bool accept) {
  nfqnl_msg_verdict_hdr v{};
  v.verdict = htonl(accept ? NF_ACCEPT : NF_DROP);
  v.id = htonl(id);
  send(Message(NFQNL_MSG_VERDICT, number_, 0).attribute(NFQA_VERDICT_HDR, v).bytes());
}

}  // namespace dtrain::netlab
