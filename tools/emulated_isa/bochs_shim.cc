// Preloaded into the Python process that runs tools/emulated_isa/run.py (never into zen).
//
// 1. The bochscpu-python wheel on PyPI was linked against glibc 2.38 and calls two of its
// C23 entry points by name; Debian 12 has glibc 2.36. Same behaviour for our use, so
// they forward to the classic functions.
// 2. bochscpu hard-codes the emulated CPU model (Cannon Lake: AVX-512 without VNNI). Bochs
// reads the model from the "cpu.model" parameter, which it looks up through
// sim_get_param_enum; when ZEN_BOCHS_MODEL holds a Bochs cpudb index, this answers that
// lookup with a parameter holding it. run.py checks CPUID in the guest, so a wrong index
// fails loudly rather than testing the wrong CPU.
#include <dlfcn.h>
#include <link.h>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {

unsigned long long __isoc23_strtoull(const char* s, char** end, int base) { return strtoull(s, end, base); }

int __isoc23_sscanf(const char* s, const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  const int n = vsscanf(s, format, ap);
  va_end(ap);
  return n;
}

}  // extern "C"

namespace {

const char* g_bochs_path;

int find_bochs(dl_phdr_info* info, size_t, void*) {
    if (strstr(info->dlpi_name, "_bochscpu") == nullptr) return 0;
  g_bochs_path = info->dlpi_name;
  return 1;
}

// A symbol of the loaded bochscpu module (Python loads it RTLD_LOCAL, so RTLD_NEXT misses it).
void* bochs_symbol(const char* name) {
  if (g_bochs_path == nullptr) dl_iterate_phdr(find_bochs, nullptr);
  void* module = g_bochs_path ? dlopen(g_bochs_path, RTLD_NOLOAD | RTLD_LAZY) : nullptr;
  void* sym = module ? dlsym(module, name) : nullptr;
  if (sym == nullptr) {
    fprintf(stderr, "bochs_shim: %s not found in the bochscpu module\n", name);
    abort();
  }
  return sym;
}

// Enough names for any cpudb index; Bochs uses only the index.
const char* kModelNames[] = {"m00", "m01", "m02", "m03", "m04", "m05", "m06", "m07", "m08", "m09", "m10",
                                    "m11", "m12", "m13", "m14", "m15", "m16", "m17", "m18", "m19", "m20", "m21",
                                    "m22", "m23", "m24", "m25", "m26", "m27", "m28", "m29", "m30", "m31", "m32",
                                    "m33", "m34", "m35", "m36", "m37", "m38", "m39", nullptr};

}  // namespace

extern "C" void* sim_get_param_enum(const char* name) {
  static void* (*real)(const char*);
  static void* model;
  const char* index = getenv("ZEN_BOCHS_MODEL");
  if (index != nullptr && strcmp(name, "cpu.model") == 0) {
    if (model == nullptr) {
      const int i = atoi(index);
      if (i < 0 || i >= static_cast<int>(sizeof(kModelNames) / sizeof(kModelNames[0])) - 1) {
        fprintf(stderr, "bochs_shim: ZEN_BOCHS_MODEL=%s is out of range\n", index);
        abort();
      }
      using MakeEnum = void* (*)(const char*, const char**, unsigned);
      const auto make = reinterpret_cast<MakeEnum>(bochs_symbol("sim_new_param_enum"));
      model = make("model", kModelNames, static_cast<unsigned>(i));
    }
    return model;
  }
  if (real == nullptr) real = reinterpret_cast<void* (*)(const char*)>(bochs_symbol("sim_get_param_enum"));
  return real(name);
}
