// Stop strings over streamed text: text is released as soon as it can no longer be the start
// of a stop string, so a stop split across tokens is still caught and never emitted.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace zen::server {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);
  // Appends text; returns the text now safe to emit. Once a stop string is found, returns
  // the text before it and ignores everything after (stopped() turns true).
  std::string push(std::string_view text);
  // End of the stream: whatever was held back (it did not complete a stop string).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string found

 private:
  // Length of the longest suffix of held_ that is a proper prefix of some stop string.
  size_t partial_suffix_length() const;
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace zen::server
