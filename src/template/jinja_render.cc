#include "template/jinja_render.h"

#include <cmath>

#include "base/error.h"
#include "template/jinja_builtins.h"

namespace zen::jinja {
namespace {

// Variables of one scope; a chain of them resolves names (innermost first).
struct Scope {
  explicit Scope(std::shared_ptr<Scope> p) : parent(std::move(p)) {}
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find_local(const std::string& name) const {
    for (const auto& [k, v] : vars)
      if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

// An error that already names its template position.
class LocatedError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void integer_overflow() { fail("integer overflow"); }

// Python ints do not overflow; ours are 64-bit and say so instead of wrapping.
template <typename Op>
Value checked_int(Op op, int64_t a, int64_t b) {
  int64_t v = 0;
  if (op(a, b, &v)) integer_overflow();
  return Value::integer(v);
}
constexpr auto kAdd = [](int64_t a, int64_t b, int64_t* v) { return __builtin_add_overflow(a, b, v); };
constexpr auto kSub = [](int64_t a, int64_t b, int64_t* v) { return __builtin_sub_overflow(a, b, v); };
constexpr auto kMul = [](int64_t a, int64_t b, int64_t* v) { return __builtin_mul_overflow(a, b, v); };

Value arith_add(const Value& l, const Value& r) {
  if (l.is_number() && r.is_number()) {
    if (l.is_float() || r.is_float()) return Value::real(l.as_double() + r.as_double());
    return checked_int(kAdd, l.as_int(), r.as_int());
  }
  if (l.is_string() && r.is_string()) return Value::string(l.as_string() + r.as_string());
  if (l.is_list() && r.is_list() && l.is_tuple() == r.is_tuple() && !l.is_generator() && !r.is_generator()) {
    std::vector<Value> items = l.items();
    items.insert(items.end(), r.items().begin(), r.items().end());
    return Value::list(std::move(items), l.is_tuple());
  }
  if (l.is_string() || l.is_list())
    fail("can only concatenate ", type_name(l), " (not \"", type_name(r), "\") to ", type_name(l));
  fail("unsupported operand type(s) for +: '", type_name(l), "' and '", type_name(r), "'");
}

Value repeat(const Value& seq, int64_t times, size_t max_bytes) {
  const int64_t n = std::max<int64_t>(times, 0);
  if (seq.is_string()) {
    if (!seq.as_string().empty() && static_cast<uint64_t>(n) > max_bytes / seq.as_string().size())
      fail("repeated string too large");
    std::string out;
    out.reserve(static_cast<size_t>(n) * seq.as_string().size());
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  if (seq.is_generator()) fail("unsupported operand type(s) for *: 'generator' and 'int'");
  if (!seq.items().empty() && static_cast<uint64_t>(n) > max_bytes / seq.items().size())
    fail("repeated list too large");
  std::vector<Value> items;
  for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(items), seq.is_tuple());
}

double float_floor_div(double a, double b) {
  const double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, a / b);
  double floored = std::floor(div);
  if (div - floored > 0.5) floored += 1.0;
  return floored;
}

double float_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0) {
    if ((b < 0) != (m < 0)) m += b;
  } else {
    m = std::copysign(0.0, b);
  }
  return m;
}

Value arith_int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  for (int64_t i = 0; i < exp; ++i) {
    if (__builtin_mul_overflow(result, base, &result)) integer_overflow();
    if (result == 0 || result == 1) break;  // further factors change nothing... unless base is -1
  }
  if (base == -1) result = (exp % 2 == 0) ? 1 : -1;
  return Value::integer(result);
}

Value arith(BinaryOp op, const Value& l, const Value& r, size_t max_bytes) {
  if (l.is_undefined()) raise_undefined(l);
  if (op == BinaryOp::kMod && l.is_string()) return Value::string(percent_format(l.as_string(), r));
  if (r.is_undefined()) raise_undefined(r);
  const char* symbol = "+";
  switch (op) {
    case BinaryOp::kAdd: return arith_add(l, r);
    case BinaryOp::kSub: symbol = "-"; break;
    case BinaryOp::kMul: symbol = "*"; break;
    case BinaryOp::kDiv: symbol = "/"; break;
    case BinaryOp::kFloorDiv: symbol = "//"; break;
    case BinaryOp::kMod: symbol = "%"; break;
    case BinaryOp::kPow: symbol = "**"; break;
    default: break;
  }
  if (op == BinaryOp::kMul) {
    if ((l.is_string() || l.is_list()) && (r.is_int() || r.is_bool())) return repeat(l, r.as_int(), max_bytes);
    if ((r.is_string() || r.is_list()) && (l.is_int() || l.is_bool())) return repeat(r, l.as_int(), max_bytes);
  }
  if (op == BinaryOp::kMod && l.is_string()) return Value::string(percent_format(l.as_string(), r));
  if (!l.is_number() || !r.is_number())
    fail("unsupported operand type(s) for ", symbol, ": '", type_name(l), "' and '", type_name(r), "'");
  const bool floating = l.is_float() || r.is_float();
  const double a = l.as_double(), b = r.as_double();
  const int64_t x = l.as_int(), y = r.as_int();
  switch (op) {
    case BinaryOp::kSub:
      if (floating) return Value::real(a - b);
      return checked_int(kSub, x, y);
    case BinaryOp::kMul:
      if (floating) return Value::real(a * b);
      return checked_int(kMul, x, y);
    case BinaryOp::kDiv:
      if (b == 0) fail(floating ? "float division by zero" : "division by zero");
      return Value::real(a / b);
    case BinaryOp::kFloorDiv:
      if (b == 0) fail(floating ? "float floor division by zero" : "integer division or modulo by zero");
      if (floating) return Value::real(float_floor_div(a, b));
      if (x == INT64_MIN && y == -1) integer_overflow();
      return Value::integer(x / y - ((x % y != 0 && ((x < 0) != (y < 0))) ? 1 : 0));
    case BinaryOp::kMod: {
      if (b == 0) fail(floating ? "float modulo" : "integer modulo by zero");
      if (floating) return Value::real(float_mod(a, b));
      if (y == -1) return Value::integer(0);
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::integer(m);
    }
    case BinaryOp::kPow:
      if (!floating && y >= 0) return arith_int_pow(x, y);
      if (a == 0 && b < 0) fail("0.0 cannot be raised to a negative power");
      if (a < 0 && b != std::floor(b)) fail("complex results are not supported");
      return Value::real(std::pow(a, b));
    default: break;
  }
  fail("unsupported operator");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string())
        fail("'in <string>' requires string as left operand, not ", type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& v : iterate(container))
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      if ((item.is_list() && !item.is_tuple()) || item.is_dict()) fail("unhashable type: '", type_name(item), "'");
      return container.dict_data().find(item) != nullptr;
    default: fail("argument of type '", type_name(container), "' is not iterable");
  }
}

bool compare_op(const std::string& op, const Value& l, const Value& r) {
  if (op == "==") return equals(l, r);
  if (op == "!=") return !equals(l, r);
  if (op == "in") return contains(r, l);
  if (op == "notin") return !contains(r, l);
  const int c = compare(l, r, op.c_str());
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

class Renderer {
 public:
  Renderer(const ParsedTemplate& tmpl, const RenderLimits& limits) : tmpl_(tmpl), limits_(limits) {}

  ~Renderer() {
    // Namespaces may hold themselves (ns.me = ns); empty them so nothing outlives the render.
    for (auto& weak : namespaces_)
      if (auto ns = weak.lock()) ns->entries.clear();
  }

  std::string run(const Value& context) {
    if (!context.is_dict()) fail("chat template: the context must be a JSON object");
    auto globals = std::make_shared<Scope>(nullptr);
    DictData builtin_globals;
    add_globals(builtin_globals);
    for (auto& [k, v] : builtin_globals.entries) globals->set(k.as_string(), v);
    globals->set("namespace", Value::function("namespace", [this](CallArgs& a) { return make_namespace(a); }));
    auto context_scope = std::make_shared<Scope>(globals);
    for (const auto& [k, v] : context.dict_data().entries)
      if (k.is_string()) context_scope->set(k.as_string(), v);
    auto top = std::make_shared<Scope>(context_scope);
    std::string out;
    exec_body(tmpl_.body, top, out);
    return out;
  }

 private:
  // ---- statements ----
  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& stmt : body) {
      const Flow flow = exec(*stmt, scope, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  void emit(std::string& out, std::string_view text) {
    output_bytes_ += text.size();
    if (output_bytes_ > limits_.max_output_bytes)
      fail("chat template: output exceeds ", limits_.max_output_bytes, " bytes");
    out += text;
  }

  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
    switch (s.kind) {
      case StmtKind::kText: emit(out, static_cast<const TextStmt&>(s).text); return Flow::kNormal;
      case StmtKind::kOutput:
        emit(out, to_str(eval(*static_cast<const OutputStmt&>(s).expr, scope)));
        return Flow::kNormal;
      case StmtKind::kIf: {
        const auto& n = static_cast<const IfStmt&>(s);
        for (const auto& [test, body] : n.branches)
          if (truthy(eval(*test, scope))) return exec_body(body, scope, out);
        return exec_body(n.otherwise, scope, out);
      }
      case StmtKind::kFor: return exec_for(static_cast<const ForStmt&>(s), scope, out);
      case StmtKind::kSet: {
        const auto& n = static_cast<const SetStmt&>(s);
        located(s.offset, [&] { assign(n.target, eval(*n.value, scope), scope); });
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        const auto& n = static_cast<const SetBlockStmt&>(s);
        std::string text;
        exec_body(n.body, scope, text);
        Value v = n.filter ? apply_block_filter(*n.filter, std::move(text), scope) : Value::string(std::move(text));
        located(s.offset, [&] { assign(n.target, std::move(v), scope); });
        return Flow::kNormal;
      }
      case StmtKind::kMacro: define_macro(static_cast<const MacroStmt&>(s), scope); return Flow::kNormal;
      case StmtKind::kCallBlock: exec_call_block(static_cast<const CallBlockStmt&>(s), scope, out); return Flow::kNormal;
      case StmtKind::kFilterBlock: {
        const auto& n = static_cast<const FilterBlockStmt&>(s);
        std::string text;
        exec_body(n.body, std::make_shared<Scope>(scope), text);
        emit(out, to_str(apply_block_filter(*n.filter, std::move(text), scope)));
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        const auto& n = static_cast<const WithStmt&>(s);
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [target, expr] : n.assignments) {
          Value v = eval(*expr, scope);
          // The binding is captured through an init-capture: clang 14 rejects naming it directly.
          located(s.offset, [&, &target = target] { assign(target, std::move(v), inner); });
        }
        return exec_body(n.body, inner, out);
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Flow exec_for(const ForStmt& n, const ScopePtr& scope, std::string& out) {
    if (n.recursive) locate_and_fail(n.offset, "recursive for loops are not supported");
    const Value iterable = eval(*n.iterable, scope);
    std::vector<Value> items;
    located(n.iterable->offset, [&] { items = iterate(iterable); });
    if (n.condition) {
      std::vector<Value> kept;
      for (auto& item : items) {
        auto filter_scope = std::make_shared<Scope>(scope);
        located(n.offset, [&] { assign(n.target, item, filter_scope); });
        if (truthy(eval(*n.condition, filter_scope))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(n.otherwise, scope, out);
    auto last_changed = std::make_shared<std::optional<Value>>();
    for (size_t i = 0; i < items.size(); ++i) {
      if (++iterations_ > limits_.max_loop_iterations)
        locate_and_fail(n.offset, "more than " + std::to_string(limits_.max_loop_iterations) + " loop iterations");
      auto body_scope = std::make_shared<Scope>(scope);
      located(n.offset, [&] { assign(n.target, items[i], body_scope); });
      body_scope->set("loop", make_loop(items, i, last_changed));
      if (exec_body(n.body, body_scope, out) == Flow::kBreak) break;
    }
    last_changed->reset();  // it may hold the loop object itself: break the cycle
    return Flow::kNormal;
  }

  static Value make_loop(const std::vector<Value>& items, size_t i,
                         const std::shared_ptr<std::optional<Value>>& last_changed) {
    const auto n = static_cast<int64_t>(items.size());
    const auto index = static_cast<int64_t>(i);
    auto d = std::make_shared<DictData>();
    auto put = [&](const char* key, Value v) { d->entries.emplace_back(Value::string(key), std::move(v)); };
    put("index", Value::integer(index + 1));
    put("index0", Value::integer(index));
    put("revindex", Value::integer(n - index));
    put("revindex0", Value::integer(n - index - 1));
    put("first", Value::boolean(i == 0));
    put("last", Value::boolean(index == n - 1));
    put("length", Value::integer(n));
    put("depth", Value::integer(1));
    put("depth0", Value::integer(0));
    if (i > 0) put("previtem", items[i - 1]);
    if (index < n - 1) put("nextitem", items[i + 1]);
    put("cycle", Value::function("loop.cycle", [index](CallArgs& a) {
          if (a.positional.empty()) fail("no items for cycling given");
          return a.positional[static_cast<size_t>(index) % a.positional.size()];
        }));
    put("changed", Value::function("loop.changed", [last_changed](CallArgs& a) {
          Value current = Value::list(a.positional);
          if (*last_changed && equals(**last_changed, current)) return Value::boolean(false);
          *last_changed = current;
          return Value::boolean(true);
        }));
    return Value::dict(std::move(d));
  }

  // Binds a value to names, a tuple of names (unpacking), or a namespace attribute.
  void assign(const Target& target, Value v, const ScopePtr& scope) {
    if (!target.attribute.empty()) {
      const Value ns = lookup(target.names[0], scope);
      if (!ns.is_namespace()) fail("cannot assign attribute on non-namespace object");
      check_namespace_name(target.attribute);
      ns.namespace_data().set(Value::string(target.attribute), std::move(v));
      return;
    }
    if (!target.is_tuple) {
      scope->set(target.names[0], std::move(v));
      return;
    }
    if (!v.is_list() && !v.is_string() && !v.is_dict())
      fail("cannot unpack non-iterable ", type_name(v), " object");
    const std::vector<Value> parts = iterate(v);
    const size_t want = target.names.size();
    if (parts.size() > want) fail("too many values to unpack (expected ", want, ")");
    if (parts.size() < want) fail("not enough values to unpack (expected ", want, ", got ", parts.size(), ")");
    for (size_t i = 0; i < want; ++i) scope->set(target.names[i], parts[i]);
  }

  Value lookup(const std::string& name, const ScopePtr& scope) const {
    for (const Scope* s = scope.get(); s; s = s->parent.get())
      if (const Value* v = s->find_local(name)) return *v;
    return Value::undefined("'" + name + "' is undefined");
  }

  // ---- macros and call blocks ----
  class CallDepth {
   public:
    explicit CallDepth(Renderer& r) : r_(r) {
      if (++r_.call_depth_ > r_.limits_.max_call_depth) fail("macro calls nested deeper than ", r_.limits_.max_call_depth);
    }
    ~CallDepth() { --r_.call_depth_; }

   private:
    Renderer& r_;
  };

  void bind_params(const std::string& what, const std::vector<Param>& params, CallArgs& args, const ScopePtr& scope) {
    std::vector<bool> bound(params.size(), false);
    std::vector<Value> varargs;
    auto kwargs = std::make_shared<DictData>();
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        scope->set(params[i].name, args.positional[i]);
        bound[i] = true;
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    for (auto& [name, value] : args.keyword) {
      size_t p = 0;
      while (p < params.size() && params[p].name != name) ++p;
      if (p == params.size()) {
        if (name == "caller") {
          scope->set("caller", value);
        } else {
          kwargs->set(Value::string(name), value);
        }
        continue;
      }
      if (bound[p]) fail(what, " got multiple values for argument '", name, "'");
      scope->set(name, value);
      bound[p] = true;
    }
    for (size_t p = 0; p < params.size(); ++p) {
      if (bound[p]) continue;
      scope->set(params[p].name, params[p].default_value
                                     ? eval(*params[p].default_value, scope)
                                     : Value::undefined("parameter '" + params[p].name + "' was not provided"));
    }
    scope->set("varargs", Value::list(std::move(varargs), true));
    scope->set("kwargs", Value::dict(std::move(kwargs)));
  }

  void define_macro(const MacroStmt& m, const ScopePtr& scope) {
    std::weak_ptr<Scope> defining = scope;
    scope->set(m.name, Value::function(m.name, [this, &m, defining](CallArgs& args) {
                 const ScopePtr parent = defining.lock();
                 if (!parent) fail("macro '", m.name, "' called after the scope defining it ended");
                 CallDepth depth(*this);
                 auto call_scope = std::make_shared<Scope>(parent);
                 bind_params("macro '" + m.name + "'", m.params, args, call_scope);
                 std::string out;
                 exec_body(m.body, call_scope, out);
                 return Value::string(std::move(out));
               }));
  }

  void exec_call_block(const CallBlockStmt& n, const ScopePtr& scope, std::string& out) {
    const auto& call = static_cast<const CallExpr&>(*n.call);
    const Value callee = eval(*call.callee, scope);
    CallArgs args = eval_args(call.args, scope);
    std::weak_ptr<Scope> defining = scope;
    args.keyword.emplace_back("caller", Value::function("caller", [this, &n, defining](CallArgs& caller_args) {
                                const ScopePtr parent = defining.lock();
                                if (!parent) fail("caller() called after its call block ended");
                                CallDepth depth(*this);
                                auto call_scope = std::make_shared<Scope>(parent);
                                bind_params("caller", n.caller_params, caller_args, call_scope);
                                std::string text;
                                exec_body(n.body, call_scope, text);
                                return Value::string(std::move(text));
                              }));
    Value result;
    located(n.offset, [&] { result = call_value(callee, args); });
    emit(out, to_str(result));
  }

  // transformers' TemplateNamespace refuses underscore names (a sandbox-escape guard).
  static void check_namespace_name(const std::string& name) {
    if (!name.empty() && name[0] == '_')
      fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '", name,
           "'. Please rename the attribute.");
  }

  Value make_namespace(CallArgs& args) {
    auto data = std::make_shared<DictData>();
    for (const auto& v : args.positional) {
      if (!v.is_dict()) fail("namespace() positional argument must be a mapping");
      for (const auto& [k, item] : v.dict_data().entries) data->set(k, item);
    }
    for (auto& [k, v] : args.keyword) data->set(Value::string(k), v);
    for (const auto& [k, v] : data->entries)
      if (k.is_string()) check_namespace_name(k.as_string());
    namespaces_.push_back(data);
    return Value::name_space(std::move(data));
  }

  // ---- expressions ----
  [[noreturn]] void locate_and_fail(size_t offset, const std::string& message) const {
    throw LocatedError("chat template: error at " + tmpl_.map.describe(offset) + ": " + message);
  }

  // Runs f, attaching the template position to any error that does not have one yet.
  template <typename F>
  void located(size_t offset, F&& f) {
    try {
      f();
    } catch (const LocatedError&) {
      throw;
    } catch (const std::exception& e) {
      locate_and_fail(offset, e.what());
    }
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    Value result;
    located(e.offset, [&] { result = eval_unlocated(e, scope); });
    return result;
  }

  CallArgs eval_args(const ArgsExpr& a, const ScopePtr& scope) {
    CallArgs args;
    for (const auto& e : a.positional) args.positional.push_back(eval(*e, scope));
    if (a.star_args)
      for (auto& v : iterate(eval(*a.star_args, scope))) args.positional.push_back(std::move(v));
    for (const auto& [k, e] : a.keyword) args.keyword.emplace_back(k, eval(*e, scope));
    if (a.star_kwargs) {
      const Value extra = eval(*a.star_kwargs, scope);
      if (!extra.is_dict()) fail("argument after ** must be a mapping, not ", type_name(extra));
      for (const auto& [k, v] : extra.dict_data().entries) {
        if (!k.is_string()) fail("keywords must be strings");
        args.keyword.emplace_back(k.as_string(), v);
      }
    }
    return args;
  }

  static Value call_value(const Value& callee, CallArgs& args) {
    if (callee.is_undefined()) raise_undefined(callee);
    if (!callee.is_function()) fail("'", type_name(callee), "' object is not callable");
    return callee.function_data().call(args);
  }

  Value apply_block_filter(const Expr& filter, std::string text, const ScopePtr& scope) {
    Value saved = std::move(block_input_);
    block_input_ = Value::string(std::move(text));
    Value result = eval(filter, scope);
    block_input_ = std::move(saved);
    return result;
  }

  Value eval_unlocated(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case ExprKind::kLiteral: return static_cast<const LiteralExpr&>(e).value;
      case ExprKind::kName: return lookup(static_cast<const NameExpr&>(e).name, scope);
      case ExprKind::kGetAttr: {
        const auto& n = static_cast<const GetAttrExpr&>(e);
        return get_attribute(eval(*n.object, scope), n.name);
      }
      case ExprKind::kGetItem: return eval_get_item(static_cast<const GetItemExpr&>(e), scope);
      case ExprKind::kSlice: fail("a slice is only allowed inside [ ]");
      case ExprKind::kCall: {
        const auto& n = static_cast<const CallExpr&>(e);
        const Value callee = eval(*n.callee, scope);
        CallArgs args = eval_args(n.args, scope);
        return call_value(callee, args);
      }
      case ExprKind::kFilter: {
        const auto& n = static_cast<const FilterExpr&>(e);
        const Value operand = n.operand ? eval(*n.operand, scope) : block_input_;
        CallArgs args = eval_args(n.args, scope);
        return apply_filter(n.name, operand, args);
      }
      case ExprKind::kTest: {
        const auto& n = static_cast<const TestExpr&>(e);
        const Value operand = eval(*n.operand, scope);
        CallArgs args = eval_args(n.args, scope);
        return Value::boolean(apply_test(n.name, operand, args));
      }
      case ExprKind::kUnary: return eval_unary(static_cast<const UnaryExpr&>(e), scope);
      case ExprKind::kBinary: {
        const auto& n = static_cast<const BinaryExpr&>(e);
        Value left = eval(*n.left, scope);
        if (n.op == BinaryOp::kAnd) return truthy(left) ? eval(*n.right, scope) : left;
        if (n.op == BinaryOp::kOr) return truthy(left) ? left : eval(*n.right, scope);
        return arith(n.op, left, eval(*n.right, scope), limits_.max_output_bytes);
      }
      case ExprKind::kConcat: {
        std::string text;
        for (const auto& part : static_cast<const ConcatExpr&>(e).parts) text += to_str(eval(*part, scope));
        return Value::string(std::move(text));
      }
      case ExprKind::kCompare: {
        const auto& n = static_cast<const CompareExpr&>(e);
        Value left = eval(*n.first, scope);
        for (const auto& [op, expr] : n.rest) {
          Value right = eval(*expr, scope);
          if (!compare_op(op, left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCondition: {
        const auto& n = static_cast<const ConditionExpr&>(e);
        if (truthy(eval(*n.test, scope))) return eval(*n.then, scope);
        if (n.otherwise) return eval(*n.otherwise, scope);
        return Value::undefined("the inline if-expression on " + tmpl_.map.describe(e.offset) +
                                " evaluated to false and no else section was defined.");
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        for (const auto& item : static_cast<const SequenceExpr&>(e).items) items.push_back(eval(*item, scope));
        return Value::list(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        auto data = std::make_shared<DictData>();
        for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
          Value key = eval(*k, scope);
          if (key.is_list() && !key.is_tuple()) fail("unhashable type: 'list'");
          if (key.is_dict() || key.is_undefined()) fail("unhashable type: '", type_name(key), "'");
          data->set(std::move(key), eval(*v, scope));
        }
        return Value::dict(std::move(data));
      }
    }
    fail("unknown expression");
  }

  Value eval_get_item(const GetItemExpr& n, const ScopePtr& scope) {
    const Value object = eval(*n.object, scope);
    if (n.index->kind == ExprKind::kSlice) {
      const auto& s = static_cast<const SliceExpr&>(*n.index);
      auto part = [&](const ExprPtr& p) { return p ? eval(*p, scope) : Value::none(); };
      const Value start = part(s.start), stop = part(s.stop), step = part(s.step);
      if (object.is_undefined()) raise_undefined(object);
      return get_slice(object, start, stop, step);
    }
    return get_item(object, eval(*n.index, scope));
  }

  Value eval_unary(const UnaryExpr& n, const ScopePtr& scope) {
    const Value v = eval(*n.operand, scope);
    if (n.op == UnaryOp::kNot) return Value::boolean(!truthy(v));
    if (v.is_undefined()) raise_undefined(v);
    if (!v.is_number())
      fail("bad operand type for unary ", n.op == UnaryOp::kNeg ? "-" : "+", ": '", type_name(v), "'");
    if (n.op == UnaryOp::kPos) return v.is_float() ? v : Value::integer(v.as_int());
    if (v.is_float()) return Value::real(-v.as_double());
    if (v.as_int() == INT64_MIN) integer_overflow();
    return Value::integer(-v.as_int());
  }

  const ParsedTemplate& tmpl_;
  RenderLimits limits_;
  size_t output_bytes_ = 0;
  size_t iterations_ = 0;
  int call_depth_ = 0;
  Value block_input_;
  std::vector<std::weak_ptr<DictData>> namespaces_;
};

}  // namespace

std::string render(const ParsedTemplate& tmpl, const Value& context, const RenderLimits& limits) {
  return Renderer(tmpl, limits).run(context);
}

}  // namespace zen::jinja
