// cpp-httplib's server with HTTP/1.1 pipelining. Stock 0.11 reads each request of a keep-alive
// connection through a fresh socket stream whose read-ahead buffer dies with it, so requests a
// client sends back to back in one write are lost after the first (ten in, one answered). This
// subclass serves a connection through one buffered stream that lives as long as the
// connection: every request is answered, in order.
#pragma once
#include <httplib.h>

namespace zen::server {

class PipeliningServer : public httplib::Server {
 private:
  bool process_and_close_socket(socket_t sock) override;
};

}  // namespace zen::server
