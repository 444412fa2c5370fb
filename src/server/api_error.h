// Errors returned to API clients as OpenAI error objects:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// Thrown while parsing or validating a request, caught by the HTTP layer, never fatal.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace zen::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string message, std::string param = "")
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  nlohmann::json to_json() const {
    nlohmann::json error = {{"message", what()}, {"type", type_}, {"param", nullptr}, {"code", status_}};
    if (!param_.empty()) error["param"] = param_;
    return {{"error", error}};
  }

 private:
  int status_;
  std::string type_;
  std::string param_;
};

// 400 naming the parameter: invalid_param("temperature", "must be in [0, 2], got ", t).
template <typename... Args>
[[noreturn]] void invalid_param(const std::string& param, Args&&... args) {
  throw ApiError(400, "invalid_request_error", detail::concat("'", param, "' ", std::forward<Args>(args)...), param);
}

}  // namespace zen::server
