#include "server/http_connection.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace zen::server {
namespace {

// Waits up to `timeout_us` for `events` on the socket; > 0 when ready.
int wait_for(socket_t sock, short events, int64_t timeout_us) {
  pollfd p{sock, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, static_cast<int>((timeout_us + 999) / 1000));
  } while (r < 0 && errno == EINTR);
  if (r > 0 && (p.revents & (POLLERR | POLLNVAL))) return -1;
  return r;
}

void address_of(socket_t sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int r = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                     : ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  if (r != 0) return;
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), service, sizeof(service),
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(service);
  }
}

// One connection's socket with a read-ahead buffer that outlives each request, so bytes of the
// next pipelined request read with this one are kept for it.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(socket_t sock, int64_t read_timeout_us, int64_t write_timeout_us)
      : sock_(sock), read_timeout_us_(read_timeout_us), write_timeout_us_(write_timeout_us), buffer_(16 * 1024) {}

  bool has_buffered() const { return pos_ < end_; }

  bool is_readable() const override { return has_buffered() || wait_for(sock_, POLLIN, read_timeout_us_) > 0; }

  // As httplib's own stream: writable, and the peer has not hung up (a pending request of a
  // pipelining client counts as alive).
  bool is_writable() const override {
    if (wait_for(sock_, POLLOUT, write_timeout_us_) <= 0) return false;
    if (wait_for(sock_, POLLIN, 0) <= 0) return true;
    char c;
    ssize_t n;
    do {
      n = ::recv(sock_, &c, 1, MSG_PEEK);
    } while (n < 0 && errno == EINTR);
    return n > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (!has_buffered()) {
      if (!is_readable()) return -1;
      if (size >= buffer_.size()) return receive(ptr, size);
      const ssize_t n = receive(buffer_.data(), buffer_.size());
      if (n <= 0) return n;
      pos_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - pos_);
    std::memcpy(ptr, buffer_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  ssize_t receive(char* ptr, size_t size) const {
    ssize_t n;
    do {
      n = ::recv(sock_, ptr, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  socket_t sock_;
  int64_t read_timeout_us_, write_timeout_us_;
  std::vector<char> buffer_;
  size_t pos_ = 0, end_ = 0;
};

}  // namespace

// httplib's keep-alive loop (at most keep_alive_max_count_ requests, each awaited for
// keep_alive_timeout_sec_, until the server stops), through one ConnectionStream.
bool PipeliningServer::process_and_close_socket(socket_t sock) {
  ConnectionStream stream(sock, read_timeout_sec_ * 1000000 + read_timeout_usec_,
                          write_timeout_sec_ * 1000000 + write_timeout_usec_);
  bool ok = false;
  for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    if (!stream.has_buffered()) {
      // Wait for the next request in slices, so a stopping server is noticed.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
      int ready = 0;
      while (svr_sock_ != INVALID_SOCKET && std::chrono::steady_clock::now() < deadline &&
             (ready = wait_for(sock, POLLIN, 10000)) == 0) {
      }
      if (ready <= 0) break;
    }
    bool connection_closed = false;
    ok = process_request(stream, left == 1, connection_closed, nullptr);
    if (!ok || connection_closed) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace zen::server
