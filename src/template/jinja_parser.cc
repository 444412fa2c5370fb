#include "template/jinja_parser.h"

#include <initializer_list>

#include "base/error.h"
#include "template/jinja_builtins.h"

namespace zen::jinja {
namespace {

// Nesting deeper than this (brackets, statements) is refused instead of exhausting the stack.
// Left-deep chains (a.b.c..., 1+1+1...) count too: the renderer recurses as deep as the tree.
constexpr int kMaxNesting = 400;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const SourceMap& map) : tokens_(tokens), map_(map) {}

  Body parse() {
    Body body = subparse({});
    if (current().type != TokenType::kEof) fail_at(current(), "unexpected " + describe(current()));
    return body;
  }

 private:
  // RAII nesting counter.
  class Nest {
   public:
    explicit Nest(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail_at(p_.current(), "template nested too deeply");
    }
    ~Nest() { --p_.depth_; }

   private:
    Parser& p_;
  };

  // Counts each link of a left-deep chain built in a loop as one level of nesting.
  class Chain {
   public:
    explicit Chain(Parser& p) : p_(p) {}
    ~Chain() { p_.depth_ -= added_; }
    void link() {
      ++added_;
      if (++p_.depth_ > kMaxNesting) p_.fail_at(p_.current(), "template nested too deeply");
    }

   private:
    Parser& p_;
    int added_ = 0;
  };

  // ---- token stream ----
  const Token& current() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[pos_ + 1 < tokens_.size() ? pos_ + 1 : pos_]; }
  const Token& advance() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  static bool is_op(const Token& t, std::string_view op) { return t.type == TokenType::kOperator && t.value == op; }
  static bool is_name(const Token& t, std::string_view name) { return t.type == TokenType::kName && t.value == name; }
  bool skip_op(std::string_view op) {
    if (!is_op(current(), op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(current(), name)) return false;
    advance();
    return true;
  }
  const Token& expect_op(std::string_view op) {
    if (!is_op(current(), op)) fail_at(current(), "expected '" + std::string(op) + "', got " + describe(current()));
    return advance();
  }
  const Token& expect_name() {
    if (current().type != TokenType::kName) fail_at(current(), "expected a name, got " + describe(current()));
    return advance();
  }
  void expect_block_end() {
    if (current().type != TokenType::kBlockEnd)
      fail_at(current(), "expected end of statement block, got " + describe(current()));
    advance();
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kBlockEnd: return "'end of statement block'";
      case TokenType::kVariableEnd: return "'end of print statement'";
      case TokenType::kBlockBegin: return "'begin of statement block'";
      case TokenType::kVariableBegin: return "'begin of print statement'";
      case TokenType::kData: return "template data";
      case TokenType::kString: return "string literal";
      default: return "'" + t.value + "'";
    }
  }

  [[noreturn]] void fail_at(const Token& t, const std::string& message) const {
    syntax_error(map_, t.offset, message);
  }

  // ---- statements ----
  bool at_end_token(std::initializer_list<std::string_view> end_tokens) const {
    for (auto name : end_tokens)
      if (is_name(current(), name)) return true;
    return false;
  }

  Body subparse(std::initializer_list<std::string_view> end_tokens) {
    Body body;
    while (current().type != TokenType::kEof) {
      const Token& t = current();
      if (t.type == TokenType::kData) {
        body.push_back(std::make_unique<TextStmt>(t.offset, t.value));
        advance();
      } else if (t.type == TokenType::kVariableBegin) {
        advance();
        ExprPtr e = parse_tuple(false, true, {}, false);
        if (current().type != TokenType::kVariableEnd)
          fail_at(current(), "expected end of print statement, got " + describe(current()));
        advance();
        body.push_back(std::make_unique<OutputStmt>(t.offset, std::move(e)));
      } else if (t.type == TokenType::kBlockBegin) {
        advance();
        if (end_tokens.size() > 0 && at_end_token(end_tokens)) return body;
        parse_statement(body);
        expect_block_end();
      } else {
        fail_at(t, "unexpected " + describe(t));
      }
    }
    return body;
  }

  // Parses "%}" body up to one of end_tokens; leaves the end token current unless dropped.
  Body parse_statements(const Token& opener, std::initializer_list<std::string_view> end_tokens, bool drop_needle) {
    Nest nest(*this);
    skip_op(":");
    expect_block_end();
    Body body = subparse(end_tokens);
    if (current().type == TokenType::kEof) {
      std::string wanted;
      for (auto name : end_tokens) wanted += (wanted.empty() ? "'" : " or '") + std::string(name) + "'";
      fail_at(current(), "unexpected end of template, expected " + wanted + " to close '" + opener.value +
                             "' opened at " + map_.describe(opener.offset));
    }
    if (drop_needle) advance();
    return body;
  }

  void parse_statement(Body& body) {
    const Token& t = current();
    if (t.type != TokenType::kName) fail_at(t, "tag name expected");
    const std::string& tag = t.value;
    if (tag == "if") return body.push_back(parse_if());
    if (tag == "for") return body.push_back(parse_for());
    if (tag == "set") return body.push_back(parse_set());
    if (tag == "macro") return body.push_back(parse_macro());
    if (tag == "call") return body.push_back(parse_call_block());
    if (tag == "filter") return body.push_back(parse_filter_block());
    if (tag == "with") return body.push_back(parse_with());
    if (tag == "generation") return body.push_back(parse_generation());
    if (tag == "print") return parse_print(body);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_at(t, "'" + tag + "' outside of a loop");
      advance();
      return body.push_back(std::make_unique<LoopControlStmt>(
          tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, t.offset));
    }
    static constexpr std::string_view kUnsupported[] = {"block", "extends", "include", "import", "from", "autoescape", "raw"};
    for (auto name : kUnsupported)
      if (tag == name) fail_at(t, "tag '" + tag + "' is not supported in chat templates");
    fail_at(t, "Encountered unknown tag '" + tag + "'.");
  }

  StmtPtr parse_if() {
    const Token& opener = advance();
    auto node = std::make_unique<IfStmt>(opener.offset);
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      Body body = parse_statements(opener, {"elif", "else", "endif"}, false);
      node->branches.emplace_back(std::move(test), std::move(body));
      const Token& t = advance();
      if (t.value == "elif") continue;
      if (t.value == "else") node->otherwise = parse_statements(opener, {"endif"}, true);
      break;
    }
    return node;
  }

  StmtPtr parse_for() {
    const Token& opener = advance();
    auto node = std::make_unique<ForStmt>(opener.offset);
    node->target = parse_assign_target({"in"}, false);
    if (!skip_name("in")) fail_at(current(), "expected 'in', got " + describe(current()));
    node->iterable = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) node->condition = parse_expression();
    node->recursive = skip_name("recursive");
    ++loop_depth_;
    node->body = parse_statements(opener, {"endfor", "else"}, false);
    --loop_depth_;
    if (advance().value == "else") node->otherwise = parse_statements(opener, {"endfor"}, true);
    return node;
  }

  StmtPtr parse_set() {
    const Token& opener = advance();
    Target target = parse_assign_target({}, true);
    if (skip_op("=")) {
      auto node = std::make_unique<SetStmt>(opener.offset);
      node->target = std::move(target);
      node->value = parse_tuple(false, true, {}, false);
      return node;
    }
    auto node = std::make_unique<SetBlockStmt>(opener.offset);
    node->target = std::move(target);
    node->filter = parse_filter(nullptr, false);
    node->body = parse_statements(opener, {"endset"}, true);
    return node;
  }

  std::vector<Param> parse_signature() {
    std::vector<Param> params;
    bool seen_default = false;
    expect_op("(");
    while (!is_op(current(), ")")) {
      if (!params.empty()) expect_op(",");
      Param p;
      p.name = expect_name().value;
      if (skip_op("=")) {
        p.default_value = parse_expression();
        seen_default = true;
      } else if (seen_default) {
        fail_at(current(), "non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  StmtPtr parse_macro() {
    const Token& opener = advance();
    auto node = std::make_unique<MacroStmt>(opener.offset);
    node->name = expect_name().value;
    node->params = parse_signature();
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    node->body = parse_statements(opener, {"endmacro"}, true);
    loop_depth_ = saved_loops;
    return node;
  }

  StmtPtr parse_call_block() {
    const Token& opener = advance();
    auto node = std::make_unique<CallBlockStmt>(opener.offset);
    if (is_op(current(), "(")) node->caller_params = parse_signature();
    node->call = parse_expression();
    if (node->call->kind != ExprKind::kCall) fail_at(opener, "expected call");
    node->body = parse_statements(opener, {"endcall"}, true);
    return node;
  }

  StmtPtr parse_filter_block() {
    const Token& opener = advance();
    auto node = std::make_unique<FilterBlockStmt>(opener.offset);
    node->filter = parse_filter(nullptr, true);
    node->body = parse_statements(opener, {"endfilter"}, true);
    return node;
  }

  StmtPtr parse_with() {
    const Token& opener = advance();
    auto node = std::make_unique<WithStmt>(opener.offset);
    while (current().type != TokenType::kBlockEnd) {
      if (!node->assignments.empty()) expect_op(",");
      Target target = parse_assign_target({}, false);
      expect_op("=");
      node->assignments.emplace_back(std::move(target), parse_expression());
    }
    node->body = parse_statements(opener, {"endwith"}, true);
    return node;
  }

  // transformers' AssistantTracker extension: {% generation %}...{% endgeneration %} renders
  // its body unchanged (it only records where assistant text is).
  StmtPtr parse_generation() {
    const Token& opener = advance();
    auto node = std::make_unique<WithStmt>(opener.offset);
    node->body = parse_statements(opener, {"endgeneration"}, true);
    return node;
  }

  void parse_print(Body& body) {
    advance();
    bool first = true;
    while (current().type != TokenType::kBlockEnd) {
      if (!first) expect_op(",");
      first = false;
      const size_t offset = current().offset;
      body.push_back(std::make_unique<OutputStmt>(offset, parse_expression()));
    }
  }

  // Names, tuples of names, or ns.attr (when with_namespace).
  Target parse_assign_target(std::initializer_list<std::string_view> extra_end, bool with_namespace) {
    Target target;
    while (true) {
      if (!target.names.empty()) expect_op(",");
      if (!target.names.empty() && is_tuple_end(extra_end)) break;
      const Token& t = current();
      if (t.type != TokenType::kName) fail_at(t, "can't assign to " + describe(t));
      static constexpr std::string_view kConstants[] = {"true", "false", "True", "False", "none", "None"};
      for (auto c : kConstants)
        if (t.value == c) fail_at(t, "can't assign to constant '" + t.value + "'");
      advance();
      target.names.push_back(t.value);
      if (with_namespace && target.names.size() == 1 && is_op(current(), ".")) {
        advance();
        target.attribute = expect_name().value;
        return target;
      }
      if (!is_op(current(), ",")) break;
      target.is_tuple = true;
    }
    return target;
  }

  // ---- expressions ----
  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = current();
    if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd || t.type == TokenType::kEof ||
        is_op(t, ")"))
      return true;
    for (auto name : extra_end)
      if (is_name(t, name)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                      bool explicit_parentheses) {
    const size_t offset = current().offset;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(simplified ? parse_primary() : (with_condexpr ? parse_expression() : parse_or()));
      if (is_op(current(), ",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) fail_at(current(), "Expected an expression, got " + describe(current()));
    }
    auto node = std::make_unique<SequenceExpr>(ExprKind::kTuple, offset);
    node->items = std::move(items);
    return node;
  }

  ExprPtr parse_expression() { return parse_condexpr(); }

  ExprPtr parse_condexpr() {
    Nest nest(*this);
    const size_t offset = current().offset;
    ExprPtr expr = parse_or();
    Chain chain(*this);
    while (skip_name("if")) {
      chain.link();
      auto node = std::make_unique<ConditionExpr>(offset);
      node->test = parse_or();
      if (skip_name("else")) node->otherwise = parse_condexpr();
      node->then = std::move(expr);
      expr = std::move(node);
    }
    return expr;
  }

  ExprPtr parse_or() {
    const size_t offset = current().offset;
    ExprPtr left = parse_and();
    Chain chain(*this);
    while (skip_name("or") && (chain.link(), true)) left = std::make_unique<BinaryExpr>(offset, BinaryOp::kOr, std::move(left), parse_and());
    return left;
  }

  ExprPtr parse_and() {
    const size_t offset = current().offset;
    ExprPtr left = parse_not();
    Chain chain(*this);
    while (skip_name("and") && (chain.link(), true)) left = std::make_unique<BinaryExpr>(offset, BinaryOp::kAnd, std::move(left), parse_not());
    return left;
  }

  ExprPtr parse_not() {
    if (is_name(current(), "not")) {
      Nest nest(*this);
      const size_t offset = advance().offset;
      return std::make_unique<UnaryExpr>(offset, UnaryOp::kNot, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const size_t offset = current().offset;
    ExprPtr expr = parse_math1();
    std::unique_ptr<CompareExpr> node;
    while (true) {
      std::string op;
      const Token& t = current();
      if (t.type == TokenType::kOperator &&
          (t.value == "==" || t.value == "!=" || t.value == "<" || t.value == ">" || t.value == "<=" || t.value == ">=")) {
        op = t.value;
        advance();
      } else if (is_name(t, "in")) {
        op = "in";
        advance();
      } else if (is_name(t, "not") && is_name(look(), "in")) {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!node) node = std::make_unique<CompareExpr>(offset, std::move(expr));
      node->rest.emplace_back(op, parse_math1());
    }
    if (node) return node;
    return expr;
  }

  ExprPtr parse_math1() {
    const size_t offset = current().offset;
    ExprPtr left = parse_concat();
    Chain chain(*this);
    while (is_op(current(), "+") || is_op(current(), "-")) {
      chain.link();
      const BinaryOp op = advance().value == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
      left = std::make_unique<BinaryExpr>(offset, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const size_t offset = current().offset;
    ExprPtr first = parse_math2();
    if (!is_op(current(), "~")) return first;
    auto node = std::make_unique<ConcatExpr>(offset);
    node->parts.push_back(std::move(first));
    while (skip_op("~")) node->parts.push_back(parse_math2());
    return node;
  }

  ExprPtr parse_math2() {
    const size_t offset = current().offset;
    ExprPtr left = parse_pow();
    Chain chain(*this);
    while (true) {
      chain.link();
      const Token& t = current();
      BinaryOp op;
      if (is_op(t, "*")) {
        op = BinaryOp::kMul;
      } else if (is_op(t, "/")) {
        op = BinaryOp::kDiv;
      } else if (is_op(t, "//")) {
        op = BinaryOp::kFloorDiv;
      } else if (is_op(t, "%")) {
        op = BinaryOp::kMod;
      } else {
        break;
      }
      advance();
      left = std::make_unique<BinaryExpr>(offset, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    const size_t offset = current().offset;
    ExprPtr left = parse_unary(true);
    Chain chain(*this);
    while (skip_op("**") && (chain.link(), true)) left = std::make_unique<BinaryExpr>(offset, BinaryOp::kPow, std::move(left), parse_unary(true));
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    const Token& t = current();
    ExprPtr node;
    if (is_op(t, "-") || is_op(t, "+")) {
      const UnaryOp op = t.value == "-" ? UnaryOp::kNeg : UnaryOp::kPos;
      advance();
      node = std::make_unique<UnaryExpr>(t.offset, op, parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    Nest nest(*this);
    const Token& t = current();
    if (t.type == TokenType::kName) {
      advance();
      if (t.value == "true" || t.value == "True") return std::make_unique<LiteralExpr>(t.offset, Value::boolean(true));
      if (t.value == "false" || t.value == "False") return std::make_unique<LiteralExpr>(t.offset, Value::boolean(false));
      if (t.value == "none" || t.value == "None") return std::make_unique<LiteralExpr>(t.offset, Value::none());
      return std::make_unique<NameExpr>(t.offset, t.value);
    }
    if (t.type == TokenType::kString) {
      std::string text;
      while (current().type == TokenType::kString) text += advance().value;
      return std::make_unique<LiteralExpr>(t.offset, Value::string(std::move(text)));
    }
    if (t.type == TokenType::kInteger) return std::make_unique<LiteralExpr>(advance().offset, Value::integer(t.integer));
    if (t.type == TokenType::kFloat) return std::make_unique<LiteralExpr>(advance().offset, Value::real(t.real));
    if (is_op(t, "(")) {
      advance();
      ExprPtr node = parse_tuple(false, true, {}, true);
      expect_op(")");
      return node;
    }
    if (is_op(t, "[")) return parse_list();
    if (is_op(t, "{")) return parse_dict();
    fail_at(t, "unexpected " + describe(t));
  }

  ExprPtr parse_list() {
    auto node = std::make_unique<SequenceExpr>(ExprKind::kList, advance().offset);
    while (!is_op(current(), "]")) {
      if (!node->items.empty()) expect_op(",");
      if (is_op(current(), "]")) break;
      node->items.push_back(parse_expression());
    }
    expect_op("]");
    return node;
  }

  ExprPtr parse_dict() {
    auto node = std::make_unique<DictExpr>(advance().offset);
    while (!is_op(current(), "}")) {
      if (!node->items.empty()) expect_op(",");
      if (is_op(current(), "}")) break;
      ExprPtr key = parse_expression();
      expect_op(":");
      node->items.emplace_back(std::move(key), parse_expression());
    }
    expect_op("}");
    return node;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    Chain chain(*this);
    while (true) {
      chain.link();
      if (is_op(current(), ".") || is_op(current(), "[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op(current(), "(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    Chain chain(*this);
    while (true) {
      chain.link();
      if (is_op(current(), "|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name(current(), "is")) {
        node = parse_test(std::move(node));
      } else if (is_op(current(), "(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    Nest nest(*this);
    const Token& t = advance();
    if (t.value == ".") {
      const Token& attr = advance();
      if (attr.type == TokenType::kName) return std::make_unique<GetAttrExpr>(t.offset, std::move(node), attr.value);
      if (attr.type != TokenType::kInteger) fail_at(attr, "expected name or number");
      return std::make_unique<GetItemExpr>(t.offset, std::move(node),
                                           std::make_unique<LiteralExpr>(attr.offset, Value::integer(attr.integer)));
    }
    std::vector<ExprPtr> args;
    while (!is_op(current(), "]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.size() == 1) return std::make_unique<GetItemExpr>(t.offset, std::move(node), std::move(args[0]));
    auto tuple = std::make_unique<SequenceExpr>(ExprKind::kTuple, t.offset);
    tuple->items = std::move(args);
    return std::make_unique<GetItemExpr>(t.offset, std::move(node), std::move(tuple));
  }

  ExprPtr parse_subscribed() {
    const size_t offset = current().offset;
    ExprPtr start;
    if (!skip_op(":")) {
      ExprPtr e = parse_expression();
      if (!skip_op(":")) return e;
      start = std::move(e);
    }
    auto slice = std::make_unique<SliceExpr>(offset);
    slice->start = std::move(start);
    auto at_slice_end = [&] { return is_op(current(), "]") || is_op(current(), ","); };
    if (!is_op(current(), ":") && !at_slice_end()) slice->stop = parse_expression();
    if (skip_op(":") && !at_slice_end()) slice->step = parse_expression();
    return slice;
  }

  ArgsExpr parse_call_args() {
    const Token& open = expect_op("(");
    ArgsExpr args;
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail_at(open, "invalid syntax for function call expression");
    };
    while (!is_op(current(), ")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(current(), ")")) break;
      }
      if (skip_op("*")) {
        ensure(!args.star_args && !args.star_kwargs);
        args.star_args = parse_expression();
      } else if (skip_op("**")) {
        ensure(!args.star_kwargs);
        args.star_kwargs = parse_expression();
      } else if (current().type == TokenType::kName && is_op(look(), "=")) {
        ensure(!args.star_kwargs);
        std::string key = advance().value;
        advance();
        args.keyword.emplace_back(std::move(key), parse_expression());
      } else {
        ensure(!args.star_args && !args.star_kwargs && args.keyword.empty());
        args.positional.push_back(parse_expression());
      }
      require_comma = true;
    }
    expect_op(")");
    return args;
  }

  ExprPtr parse_call(ExprPtr callee) {
    Nest nest(*this);
    auto node = std::make_unique<CallExpr>(current().offset, std::move(callee));
    node->args = parse_call_args();
    return node;
  }

  std::string dotted_name() {
    std::string name = expect_name().value;
    while (skip_op(".")) name += "." + expect_name().value;
    return name;
  }

  // Returns operand unchanged when no filter follows (and not start_inline).
  ExprPtr parse_filter(ExprPtr operand, bool start_inline) {
    Chain chain(*this);
    while (is_op(current(), "|") || start_inline) {
      chain.link();
      if (!start_inline) advance();
      const size_t offset = current().offset;
      auto node = std::make_unique<FilterExpr>(offset, std::move(operand), dotted_name());
      if (is_op(current(), "(")) node->args = parse_call_args();
      operand = std::move(node);
      start_inline = false;
    }
    return operand;
  }

  ExprPtr parse_test(ExprPtr operand) {
    Nest nest(*this);
    const Token& is_token = advance();
    const bool negated = skip_name("not");
    auto node = std::make_unique<TestExpr>(current().offset, std::move(operand), dotted_name());
    const Token& t = current();
    if (is_op(t, "(")) {
      node->args = parse_call_args();
    } else if ((t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInteger ||
                t.type == TokenType::kFloat || is_op(t, "[") || is_op(t, "{")) &&
               !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
      if (is_name(t, "is")) fail_at(t, "You cannot chain multiple tests with is");
      node->args.positional.push_back(parse_postfix(parse_primary()));
    }
    if (negated) return std::make_unique<UnaryExpr>(is_token.offset, UnaryOp::kNot, std::move(node));
    return node;
  }

  const std::vector<Token>& tokens_;
  const SourceMap& map_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

// jinja2 rejects unknown filter and test names when compiling, except inside `if` statements
// and conditional expressions (where it defers the error to when they run).
class NameChecker {
 public:
  explicit NameChecker(const SourceMap& map) : map_(map) {}

  void body(const Body& stmts, bool soft) {
    for (const auto& s : stmts) stmt(*s, soft);
  }

 private:
  void stmt(const Stmt& s, bool soft) {
    switch (s.kind) {
      case StmtKind::kOutput: return expr(static_cast<const OutputStmt&>(s).expr.get(), soft);
      case StmtKind::kIf: {
        const auto& n = static_cast<const IfStmt&>(s);
        for (const auto& [test, branch] : n.branches) {
          expr(test.get(), true);
          body(branch, true);
        }
        return body(n.otherwise, true);
      }
      case StmtKind::kFor: {
        const auto& n = static_cast<const ForStmt&>(s);
        expr(n.iterable.get(), soft);
        expr(n.condition.get(), false);
        body(n.body, false);
        return body(n.otherwise, soft);
      }
      case StmtKind::kSet: return expr(static_cast<const SetStmt&>(s).value.get(), soft);
      case StmtKind::kSetBlock: {
        const auto& n = static_cast<const SetBlockStmt&>(s);
        expr(n.filter.get(), soft);
        return body(n.body, soft);
      }
      case StmtKind::kMacro: {
        const auto& n = static_cast<const MacroStmt&>(s);
        for (const auto& p : n.params) expr(p.default_value.get(), false);
        return body(n.body, false);
      }
      case StmtKind::kCallBlock: {
        const auto& n = static_cast<const CallBlockStmt&>(s);
        expr(n.call.get(), soft);
        return body(n.body, false);
      }
      case StmtKind::kFilterBlock: {
        const auto& n = static_cast<const FilterBlockStmt&>(s);
        expr(n.filter.get(), soft);
        return body(n.body, soft);
      }
      case StmtKind::kWith: {
        const auto& n = static_cast<const WithStmt&>(s);
        for (const auto& a : n.assignments) expr(a.second.get(), soft);
        return body(n.body, false);
      }
      default: return;
    }
  }

  void args(const ArgsExpr& a, bool soft) {
    for (const auto& e : a.positional) expr(e.get(), soft);
    for (const auto& [k, e] : a.keyword) expr(e.get(), soft);
    expr(a.star_args.get(), soft);
    expr(a.star_kwargs.get(), soft);
  }

  void expr(const Expr* e, bool soft) {
    if (!e) return;
    switch (e->kind) {
      case ExprKind::kGetAttr: return expr(static_cast<const GetAttrExpr*>(e)->object.get(), soft);
      case ExprKind::kGetItem: {
        const auto* n = static_cast<const GetItemExpr*>(e);
        expr(n->object.get(), soft);
        return expr(n->index.get(), soft);
      }
      case ExprKind::kSlice: {
        const auto* n = static_cast<const SliceExpr*>(e);
        expr(n->start.get(), soft);
        expr(n->stop.get(), soft);
        return expr(n->step.get(), soft);
      }
      case ExprKind::kCall: {
        const auto* n = static_cast<const CallExpr*>(e);
        expr(n->callee.get(), soft);
        return args(n->args, soft);
      }
      case ExprKind::kFilter: {
        const auto* n = static_cast<const FilterExpr*>(e);
        if (!soft && !is_known_filter(n->name)) syntax_error(map_, n->offset, "No filter named '" + n->name + "'.");
        expr(n->operand.get(), soft);
        return args(n->args, soft);
      }
      case ExprKind::kTest: {
        const auto* n = static_cast<const TestExpr*>(e);
        if (!soft && !is_known_test(n->name)) syntax_error(map_, n->offset, "No test named '" + n->name + "'.");
        expr(n->operand.get(), soft);
        return args(n->args, soft);
      }
      case ExprKind::kUnary: return expr(static_cast<const UnaryExpr*>(e)->operand.get(), soft);
      case ExprKind::kBinary: {
        const auto* n = static_cast<const BinaryExpr*>(e);
        expr(n->left.get(), soft);
        return expr(n->right.get(), soft);
      }
      case ExprKind::kConcat:
        for (const auto& p : static_cast<const ConcatExpr*>(e)->parts) expr(p.get(), soft);
        return;
      case ExprKind::kCompare: {
        const auto* n = static_cast<const CompareExpr*>(e);
        expr(n->first.get(), soft);
        for (const auto& [op, r] : n->rest) expr(r.get(), soft);
        return;
      }
      case ExprKind::kCondition: {
        const auto* n = static_cast<const ConditionExpr*>(e);
        expr(n->test.get(), true);
        expr(n->then.get(), true);
        return expr(n->otherwise.get(), true);
      }
      case ExprKind::kList:
      case ExprKind::kTuple:
        for (const auto& item : static_cast<const SequenceExpr*>(e)->items) expr(item.get(), soft);
        return;
      case ExprKind::kDict:
        for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items) {
          expr(k.get(), soft);
          expr(v.get(), soft);
        }
        return;
      default: return;
    }
  }

  const SourceMap& map_;
};

}  // namespace

std::unique_ptr<ParsedTemplate> parse_template(std::string_view source) {
  auto tmpl = std::make_unique<ParsedTemplate>(normalize_newlines(source));
  const std::vector<Token> tokens = tokenize(tmpl->source, tmpl->map);
  tmpl->body = Parser(tokens, tmpl->map).parse();
  NameChecker(tmpl->map).body(tmpl->body, false);
  return tmpl;
}

}  // namespace zen::jinja
