// Syntax tree of a parsed template. Nodes carry the source offset they start at so runtime
// errors can name a line. The renderer switches on `kind` and downcasts.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja_value.h"

namespace zen::jinja {

enum class ExprKind {
  kLiteral, kName, kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest, kUnary, kBinary,
  kConcat, kCompare, kCondition, kList, kTuple, kDict,
};

struct Expr {
  Expr(ExprKind k, size_t off) : kind(k), offset(off) {}
  virtual ~Expr() = default;
  ExprKind kind;
  size_t offset;
};
using ExprPtr = std::unique_ptr<Expr>;

struct LiteralExpr : Expr {
  LiteralExpr(size_t off, Value v) : Expr(ExprKind::kLiteral, off), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(size_t off, std::string n) : Expr(ExprKind::kName, off), name(std::move(n)) {}
  std::string name;
};

struct GetAttrExpr : Expr {  // obj.name
  GetAttrExpr(size_t off, ExprPtr o, std::string n)
      : Expr(ExprKind::kGetAttr, off), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};

struct GetItemExpr : Expr {  // obj[index]; index may be a SliceExpr
  GetItemExpr(size_t off, ExprPtr o, ExprPtr i)
      : Expr(ExprKind::kGetItem, off), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object, index;
};

struct SliceExpr : Expr {  // start:stop:step, each optional
  explicit SliceExpr(size_t off) : Expr(ExprKind::kSlice, off) {}
  ExprPtr start, stop, step;
};

struct ArgsExpr {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star_args, star_kwargs;  // *args, **kwargs
};

struct CallExpr : Expr {
  CallExpr(size_t off, ExprPtr c) : Expr(ExprKind::kCall, off), callee(std::move(c)) {}
  ExprPtr callee;
  ArgsExpr args;
};

// value|name(args); operand is null for the filter of a {% filter %} or {% set %} block,
// which applies to the block's rendered text.
struct FilterExpr : Expr {
  FilterExpr(size_t off, ExprPtr o, std::string n)
      : Expr(ExprKind::kFilter, off), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  ArgsExpr args;
};

struct TestExpr : Expr {  // value is name(args)
  TestExpr(size_t off, ExprPtr o, std::string n)
      : Expr(ExprKind::kTest, off), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  ArgsExpr args;
};

enum class UnaryOp { kNeg, kPos, kNot };
struct UnaryExpr : Expr {
  UnaryExpr(size_t off, UnaryOp o, ExprPtr e) : Expr(ExprKind::kUnary, off), op(o), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kAnd, kOr };
struct BinaryExpr : Expr {
  BinaryExpr(size_t off, BinaryOp o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::kBinary, off), op(o), left(std::move(l)), right(std::move(r)) {}
  BinaryOp op;
  ExprPtr left, right;
};

struct ConcatExpr : Expr {  // a ~ b ~ c
  explicit ConcatExpr(size_t off) : Expr(ExprKind::kConcat, off) {}
  std::vector<ExprPtr> parts;
};

// a < b <= c: ops are "==", "!=", "<", "<=", ">", ">=", "in", "notin".
struct CompareExpr : Expr {
  CompareExpr(size_t off, ExprPtr f) : Expr(ExprKind::kCompare, off), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;
};

struct ConditionExpr : Expr {  // then if test else otherwise
  explicit ConditionExpr(size_t off) : Expr(ExprKind::kCondition, off) {}
  ExprPtr test, then, otherwise;  // otherwise may be null
};

struct SequenceExpr : Expr {  // [a, b] or (a, b)
  SequenceExpr(ExprKind k, size_t off) : Expr(k, off) {}
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(size_t off) : Expr(ExprKind::kDict, off) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

enum class StmtKind {
  kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kWith,
  kBreak, kContinue,
};

struct Stmt {
  Stmt(StmtKind k, size_t off) : kind(k), offset(off) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  size_t offset;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Assignment target: a name, a tuple of names (for k, v in ...), or ns.attr (set only).
struct Target {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string attribute;  // non-empty: names[0].attribute
};

struct TextStmt : Stmt {
  TextStmt(size_t off, std::string t) : Stmt(StmtKind::kText, off), text(std::move(t)) {}
  std::string text;
};

struct OutputStmt : Stmt {  // {{ expr }}
  OutputStmt(size_t off, ExprPtr e) : Stmt(StmtKind::kOutput, off), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(size_t off) : Stmt(StmtKind::kIf, off) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body otherwise;
};

struct ForStmt : Stmt {
  explicit ForStmt(size_t off) : Stmt(StmtKind::kFor, off) {}
  Target target;
  ExprPtr iterable, condition;  // condition may be null
  Body body, otherwise;
  bool recursive = false;
};

struct SetStmt : Stmt {
  explicit SetStmt(size_t off) : Stmt(StmtKind::kSet, off) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(size_t off) : Stmt(StmtKind::kSetBlock, off) {}
  Target target;
  ExprPtr filter;  // may be null
  Body body;
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct MacroStmt : Stmt {
  explicit MacroStmt(size_t off) : Stmt(StmtKind::kMacro, off) {}
  std::string name;
  std::vector<Param> params;
  Body body;
};

struct CallBlockStmt : Stmt {  // {% call(params) macro(args) %}body{% endcall %}
  explicit CallBlockStmt(size_t off) : Stmt(StmtKind::kCallBlock, off) {}
  ExprPtr call;
  std::vector<Param> caller_params;
  Body body;
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(size_t off) : Stmt(StmtKind::kFilterBlock, off) {}
  ExprPtr filter;
  Body body;
};

// {% with a = 1 %}...{% endwith %}; also transformers' {% generation %} (no assignments).
struct WithStmt : Stmt {
  explicit WithStmt(size_t off) : Stmt(StmtKind::kWith, off) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

struct LoopControlStmt : Stmt {  // break / continue
  LoopControlStmt(StmtKind k, size_t off) : Stmt(k, off) {}
};

}  // namespace zen::jinja
