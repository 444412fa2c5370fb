#include "server/chat_page.h"
namespace zen::server {
std::string_view chat_page_html() { return "<html></html>"; }
}
