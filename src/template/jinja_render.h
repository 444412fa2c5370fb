// Renders a parsed template against a context, with jinja2's runtime semantics: scoping
// (each loop iteration and macro call gets its own scope; `if` does not), Undefined values,
// loop variables, macros, namespaces, loop controls. Guards against runaway templates:
// output size, loop iterations and macro recursion are bounded (zen::Error when exceeded).
#pragma once
#include <string>

#include "template/jinja_parser.h"
#include "template/jinja_value.h"

namespace zen::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;
  size_t max_loop_iterations = 10'000'000;
  int max_call_depth = 200;
};

// context must be a dict value; its entries are the template's variables.
std::string render(const ParsedTemplate& tmpl, const Value& context, const RenderLimits& limits = {});

}  // namespace zen::jinja
