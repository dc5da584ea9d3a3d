// A client of one HTTP/1.1 server for small requests (etcd's JSON gateway, etcd_client.h):
// one connection, kept open between requests and opened again after a failure. Every request
// is bounded by its deadline: a server that stops answering fails it, it never hangs.
#pragma once

#include <chrono>
#include <string>

#include "dtrain/comm/error.h"

namespace dtrain::comm {

// A request that got no answer. `maybe_delivered`: the request was (perhaps partly) sent
// before the failure, so the server may have acted on it; false when no connection could be
// made (the request certainly did nothing).
class HttpFailure : public CommError {
 public:
  HttpFailure(const std::string& what, bool maybe_delivered)
      : CommError(what), maybe_delivered(maybe_delivered) {}
  bool maybe_delivered;
};

class HttpClient {
 public:
  HttpClient(std::string host, int port);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  struct Response {
    int status = 0;
    std::string body;
  };
  // POSTs `body` (JSON) to `path` and returns the answer, whatever its status. Throws
  // HttpFailure when no whole answer came within `timeout`, or the answer is not HTTP.
  Response post(const std::string& path, const std::string& body,
                std::chrono::milliseconds timeout);
  std::string endpoint() const { return host_ + ":" + std::to_string(port_); }

 private:
  using Deadline = std::chrono::steady_clock::time_point;
  void open(Deadline deadline);
  void close_connection();
  void send_all(const std::string& bytes, Deadline deadline);
  // Reads more bytes into buffer_; false when the server closed the connection.
  bool read_more(Deadline deadline);
  [[noreturn]] void server_closed();  // the server closed the connection: a failure
  std::string read_line(Deadline deadline);
  std::string read_exactly(size_t n, Deadline deadline);
  Response read_response(Deadline deadline);

  std::string host_;
  int port_;
  int fd_ = -1;
  std::string buffer_;     // received, not yet parsed
  bool answered_ = false;  // a byte of the current request's answer came
  bool closed_ = false;    // the server closed the connection during the current request
};

}  // namespace dtrain::comm
