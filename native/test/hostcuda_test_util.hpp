// Shared by hostcuda_test.cpp and hostcuda_test_vmm.cpp: the check counters and the
// dlopen'ed host library.
#pragma once

extern void* g_lib;  // the host library, dlopen'ed (never linked)
void check_true(bool ok, const char* expr, int line);
#define CHECK(cond) check_true((cond), #cond, __LINE__)
