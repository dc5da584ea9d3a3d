// One netfilter queue (NFQUEUE) as seen from user space: the kernel hands each packet that an
// `iptables ... -j NFQUEUE --queue-num N` rule sends there to this socket (its id only, no
// payload) and holds the packet until a verdict comes back. Raw netlink
// (linux/netfilter/nfnetlink_queue.h), no library. The queue belongs to the network
// namespace the calling thread is in when it is made.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::netlab {

class NfQueue {
 public:
  // Binds queue `number`; throws std::runtime_error saying why it cannot (not root, the
  // kernel has no nfnetlink_queue, the queue is taken). `whole_gso_packets`: hand over a
  // GSO packet as it is; otherwise the kernel segments it and queues each segment.
  NfQueue(uint16_t number, bool whole_gso_packets);
  ~NfQueue();
  NfQueue(const NfQueue&) = delete;
  NfQueue& operator=(const NfQueue&) = delete;

  int fd() const { return fd_; }
  // Appends the ids of the packets waiting on the socket; does not block. Returns false when
  // the kernel reported that messages were lost (its buffer overflowed: those packets were
  // dropped by the kernel).
  bool receive(std::vector<uint32_t>& ids);
  // Lets packet `id` go on (accept) or drops it.
  void verdict(uint32_t id, bool accept);

 private:
  void send(const std::vector<char>& message) const;
  void expect_ack(const std::string& what);

  int fd_ = -1;
  uint16_t number_;
  std::vector<char> buffer_;
};

}  // namespace dtrain::netlab
