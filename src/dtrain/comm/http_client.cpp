#include "dtrain/comm/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "dtrain/base/parse.h"

namespace dtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

int millis_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Waits until `fd` is ready for `events`; false when the deadline passed first.
bool ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, millis_left(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

HttpClient::HttpClient(std::string host, int port) : host_(std::move(host)), port_(port) {}

HttpClient::~HttpClient() {
  close_connection();
}

void HttpClient::close_connection() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffer_.clear();
}

void HttpClient::open(Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found))
    throw HttpFailure("cannot resolve " + host_ + ": " + gai_strerror(rc), false);
  std::string error = "no usable address";
  for (const addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      int err = ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (ready(fd, POLLOUT, deadline)) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      errno = err;
      rc = err == 0 ? 0 : -1;
    }
    if (rc == 0) {
      const int on = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
      fd_ = fd;
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (fd_ < 0) throw HttpFailure("cannot connect to " + endpoint() + ": " + error, false);
}

void HttpClient::send_all(const std::string& bytes, Deadline deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!ready(fd_, POLLOUT, deadline))
        throw HttpFailure(endpoint() + " took no request within the deadline", true);
    } else {
      throw HttpFailure("sending to " + endpoint() + " failed: " + std::strerror(errno), true);
    }
  }
}

void HttpClient::server_closed() {
  closed_ = true;
  throw HttpFailure(endpoint() + " closed the connection", true);
}

bool HttpClient::read_more(Deadline deadline) {
  char chunk[16384];
  for (;;) {
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      answered_ = true;
      return true;
    }
    if (n == 0) return false;
    if (errno != EAGAIN && errno != EINTR)
      throw HttpFailure("reading from " + endpoint() + " failed: " + std::strerror(errno), true);
    if (!ready(fd_, POLLIN, deadline))
      throw HttpFailure(endpoint() + " did not answer within the deadline", true);
  }
}

std::string HttpClient::read_line(Deadline deadline) {
  size_t end;
  while ((end = buffer_.find("\r\n")) == std::string::npos) {
    if (buffer_.size() > (1 << 16)) throw HttpFailure(endpoint() + " sent a line too long", true);
    if (!read_more(deadline)) server_closed();
  }
  std::string line = buffer_.substr(0, end);
  buffer_.erase(0, end + 2);
  return line;
}

std::string HttpClient::read_exactly(size_t n, Deadline deadline) {
  while (buffer_.size() < n)
    if (!read_more(deadline)) server_closed();
  std::string out = buffer_.substr(0, n);
  buffer_.erase(0, n);
  return out;
}

HttpClient::Response HttpClient::read_response(Deadline deadline) {
  Response r;
  const std::string status = read_line(deadline);
  const auto code = status.size() >= 12 && status.compare(0, 5, "HTTP/") == 0
                        ? parse_integer(status.substr(9, 3), 100, 599)
                        : std::nullopt;
  if (!code) throw HttpFailure(endpoint() + " answered what is not HTTP: " + status, true);
  r.status = static_cast<int>(*code);
  std::optional<int64_t> length;
  bool chunked = false, keep = true;
  for (std::string line; !(line = read_line(deadline)).empty();) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = lower(line.substr(0, colon));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (name == "content-length") length = parse_integer(value, 0, 1 << 30);
    if (name == "transfer-encoding") chunked = lower(value).find("chunked") != std::string::npos;
    if (name == "connection") keep = lower(value) != "close";
  }
  if (chunked) {
    for (;;) {
      const std::string line = read_line(deadline);
      char* end = nullptr;
      const long long size = std::strtoll(line.c_str(), &end, 16);
      if (end == line.c_str() || size < 0 || size > (1 << 30))
        throw HttpFailure(endpoint() + " sent a malformed chunk size: " + line, true);
      if (size == 0) break;
      r.body += read_exactly(static_cast<size_t>(size), deadline);
      read_line(deadline);
    }
    while (!read_line(deadline).empty()) {  // trailers
    }
  } else if (length) {
    r.body = read_exactly(static_cast<size_t>(*length), deadline);
  } else {
    while (read_more(deadline)) {
    }
    r.body = std::move(buffer_);
    keep = false;
  }
  if (!keep) close_connection();
  return r;
}

HttpClient::Response HttpClient::post(const std::string& path, const std::string& body,
                                      std::chrono::milliseconds timeout) {
  const Deadline deadline = Clock::now() + timeout;
  const std::string request =
      "POST " + path + " HTTP/1.1\r\nHost: " + host_ +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  // A kept connection the server closed since shows only now: one fresh attempt then.
  for (int attempt = 0;; ++attempt) {
    const bool reused = fd_ >= 0;
    if (!reused) open(deadline);
    answered_ = closed_ = false;
    try {
      send_all(request, deadline);
      return read_response(deadline);
    } catch (const HttpFailure&) {
      close_connection();
      // Closed before a byte of the answer: the server had dropped the idle connection.
      if (!(reused && attempt == 0 && closed_ && !answered_)) throw;
    }
  }
}

}  // namespace dtrain::comm
