"""Golden diagnostics: malformed programs, each with the exact line:col and a fragment of every error
reported; then fuzzing (random bytes, token soup, truncations and mutations of the test programs)
asserting that only CompileError ever leaves the frontend, never a traceback or a hang."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcompiler.diagnostics import CompileError
from kcompiler.frontend import check, load_program, lower

from ..frontend_util import AMD, NV
from ..paths import EXAMPLES, PROGRAMS, ROOT


DEEP_EXPR = "kernel k(p: ptr<f32>) {\n    p[0] = " + "-(" * 5000 + "1.0" + ")" * 5000 + ";\n}\n"
DEEP_IFS = "kernel k(n: i32) {\n" + "if n > 0 { " * 5000 + "}" * 5000 + "\n}\n"


def diagnose(src: str, target=NV) -> list:
    """Every error of ``src`` (loading, then checking for ``target``); [] if it compiles."""
    try:
        check(load_program(src, "bad.kc", keep_going=True), target)
    except CompileError as e:
        return e.diagnostics
    return []


#: (name, source, [(line, col, message fragment), ...]): every error, in order.
CASES = [
    ('name_and_type_errors_together',
     'fn g(x: f32) -> f32 {\n    return zz + x;\n}\nkernel k(p: ptr<f32>) {\n    p[0] = true;\n'
     '    p[1] = g(1.0);\n}\n',
     [(2, 12, "unknown name 'zz'"), (5, 12, "cannot store bool into ptr<f32>")]),
    ('unknown_name_and_type_error_in_one_kernel',
     'kernel k(out: ptr<f32>, n: i32) {\n    let a = undefined_thing + 1;\n    out[0] = a;\n'
     '    let b: f32 = 2.0;\n    let c: i32 = b;\n    out[n] = true;\n}\n',
     [(2, 13, "unknown name 'undefined_thing'"), (5, 18, "cannot initialise 'c' (i32) with f32"),
      (6, 14, "cannot store bool into ptr<f32>")]),
    ('unknown_type_and_module_fn_then_type_errors',
     'import std.math\nfn g(x: flaot) -> f32 {\n    return x;\n}\nfn h(q: ptr<f32, sharred>) {\n}\n'
     'kernel k(out: ptr<f32>) {\n    let y = math.nope(1.0);\n    out[0] = y + g(1.0);\n    h(out);\n'
     '    out[1] = g(2.0);\n    let z: u8 = 300;\n}\n',
     [(2, 9, "unknown type 'flaot'"), (5, 18, "unknown address space 'sharred'"),
      (8, 18, "module 'math' has no fn 'nope'"), (12, 17, "300 does not fit in u8")]),
    ('missing_semicolon',
     'kernel k(p: ptr<f32>) {\n    let x = 1.0\n    p[0] = x;\n}\n',
     [(2, 16, "expected ';' after this, found name 'p'")]),
    ('unexpected_token',
     'kernel k(p: ptr<f32>) {\n    p[0] = (1.0 + ;\n}\n',
     [(2, 19, "unexpected ';'")]),
    ('unexpected_eof',
     'kernel k(p: ptr<f32>) {\n    p[0] = 1.0;\n',
     [(2, 16, 'unexpected end of input')]),
    ('bad_character',
     'kernel k(p: ptr<f32>) {\n    p[0] = 1.0 $ 2.0;\n}\n',
     [(2, 16, "unexpected character '$'")]),
    ('nul_byte',
     'kernel k(p: ptr<f32>) {\n    p[0] = 1.0;\x00\n}\n',
     [(2, 16, "unexpected character '\\x00'")]),
    ('unterminated_string',
     'kernel k() {\n    comptime if target.has("wgmma) { }\n}\n',
     [(2, 28, 'unterminated string literal')]),
    ('unterminated_comment',
     'kernel k() {\n    /* never closed\n}\n',
     [(2, 5, "unterminated block comment: '/*' has no matching '*/'")]),
    ('malformed_number',
     'kernel k(p: ptr<i32>) {\n    p[0] = 0x_;\n}\n',
     [(2, 12, "malformed number '0x_'")]),
    ('too_deep_expression',
     DEEP_EXPR,
     [(2, 8012, 'nesting too deep: expressions and blocks may nest at most 10')]),
    ('too_deep_ifs',
     DEEP_IFS,
     [(2, 51336, 'nesting too deep: expressions and blocks may nest at most 10')]),
    ('unknown_name',
     'kernel k(p: ptr<f32>) {\n    p[0] = flor(p[1]);\n}\n',
     [(2, 12, "unknown name 'flor'")]),
    ('unknown_type',
     'kernel k(p: ptr<float>) {\n}\n',
     [(1, 17, "unknown type 'float'")]),
    ('unknown_address_space',
     'kernel k(p: ptr<f32, shard>) {\n}\n',
     [(1, 22, "unknown address space 'shard'")]),
    ('fn_arity',
     'fn f(a: f32, b: f32) -> f32 { return a + b; }\nkernel k(p: ptr<f32>) {\n    p[0] = f(1.0);\n}\n',
     [(3, 12, "fn 'f' takes 2 arguments, found 1")]),
    ('builtin_arity',
     'kernel k(p: ptr<f32>) {\n    p[0] = fma(p[1], p[2]);\n}\n',
     [(2, 12, 'fma takes 3 arguments, found 2')]),
    ('assign_to_let',
     'kernel k(p: ptr<f32>) {\n    let x = p[0];\n    x = 2.0;\n}\n',
     [(3, 5, "cannot assign to 'x': it was declared with let")]),
    ('assign_to_param',
     'kernel k(p: ptr<f32>, n: i32) {\n    n += 1;\n}\n',
     [(2, 5, "cannot assign to 'n': it is a parameter")]),
    ('assign_to_loop_var',
     'kernel k(p: ptr<f32>) {\n    for i in range(8) {\n        i = 2;\n    }\n}\n',
     [(3, 9, "cannot assign to 'i': it is the loop variable")]),
    ('break_outside_loop',
     'kernel k() {\n    if true {\n        break;\n    }\n}\n',
     [(3, 9, "'break' outside of a loop")]),
    ('continue_outside_loop',
     'fn f() {\n    continue;\n}\n',
     [(2, 5, "'continue' outside of a loop")]),
    ('break_in_comptime_for',
     'kernel k(p: ptr<f32>) {\n    for i in comptime range(4) {\n        if p[i] > 0.0 { break; }\n    }\n}\n',
     [(3, 25, "'break' in a comptime for loop: its iterations are unrolled ")]),
    ('missing_return',
     'fn f(x: f32) -> f32 {\n    if x > 0.0 {\n        return x;\n    }\n}\n',
     [(5, 1, "fn 'f' can reach its end without returning a value (f32)")]),
    ('self_recursion',
     'fn fact(n: i32) -> i32 {\n    if n <= 1 { return 1; }\n    return n * fact(n - 1);\n}\n',
     [(3, 16, "fn 'fact' calls itself: fact -> fact")]),
    ('mutual_recursion',
     'fn even(n: i32) -> bool {\n    return n == 0 || odd(n - 1);\n}\nfn odd(n: i32) -> bool {\n    return n != 0 && even(n - 1);\n}\n',
     [(5, 22, 'recursive calls: even -> odd -> even')]),
    ('shared_in_fn',
     'fn f(p: ptr<f32>) {\n    shared t: [f32; 32];\n}\n',
     [(2, 5, "shared array 't' declared in fn 'f'; shared memory is declar")]),
    ('runtime_array_size',
     'kernel k(n: i32) {\n    var a: [f32; n];\n}\n',
     [(2, 18, 'an array length must be a compile-time constant')]),
    ('narrowing_store',
     'kernel k(out: ptr<f32>, x: f64) {\n    out[0] = x * 2.0;\n}\n',
     [(2, 14, 'cannot store f64 into ptr<f32>')]),
    ('narrowing_assign',
     'kernel k(p: ptr<f32>) {\n    var h: f16 = 1.0;\n    h = p[0];\n}\n',
     [(3, 9, "cannot assign f32 to 'h' of type f16")]),
    ('narrowing_return',
     'fn half(x: f32) -> f16 {\n    return x * 0.5;\n}\n',
     [(2, 12, "cannot return f32 from fn 'half' returning f16")]),
    ('signed_unsigned_mix',
     'kernel k(p: ptr<u32>, n: i32) {\n    p[0] = p[1] + n;\n}\n',
     [(2, 12, "cannot mix signed i32 and unsigned u32 in '+'")]),
    ('int_float_mix',
     'kernel k(p: ptr<f32>, n: i32) {\n    p[0] = p[1] * n;\n}\n',
     [(2, 12, "cannot mix f32 and i32 in '*'")]),
    ('condition_not_bool',
     'kernel k(p: ptr<f32>, n: i32) {\n    if n {\n        p[0] = 1.0;\n    }\n}\n',
     [(2, 8, 'a condition must be bool, found i32')]),
    ('kernel_returns_value',
     'kernel k(p: ptr<f32>) {\n    return p[0];\n}\n',
     [(2, 12, "kernel 'k' cannot return a value")]),
    ('void_fn_returns_value',
     'fn f(x: f32) {\n    return x;\n}\n',
     [(2, 12, "fn 'f' returns nothing but a value is returned")]),
    ('return_without_value',
     'fn f(x: f32) -> f32 {\n    return;\n}\n',
     [(2, 5, "fn 'f' must return a value of type f32")]),
    ('literal_out_of_range',
     'kernel k(p: ptr<u8>) {\n    p[0] = 256;\n}\n',
     [(2, 12, 'cannot store integer literal 256 into ptr<u8>: 256 does not ')]),
    ('comptime_if_runtime_cond',
     'kernel k(p: ptr<f32>) {\n    comptime if p[0] > 0.0 {\n    }\n}\n',
     [(2, 17, 'the condition of a comptime if must be a compile-time consta')]),
    ('duplicate_fn',
     'fn f() {}\nfn f() {}\n',
     [(2, 4, "'f' is already defined at bad.kc:1:4")]),
    ('duplicate_let',
     'kernel k() {\n    let x = 1;\n    let x = 2;\n}\n',
     [(3, 9, "'x' is already declared in this block")]),
    ('keyword_as_name',
     'kernel k() {\n    let ptr = 1;\n}\n',
     [(2, 9, "'ptr' is a keyword and cannot be used as a name")]),
    ('call_kernel',
     'kernel a() {}\nkernel b() {\n    a();\n}\n',
     [(3, 5, "'a' is a kernel; kernels are launched from the host, not cal")]),
    ('missing_module',
     'import std.linalg\nkernel k() {}\n',
     [(1, 1, "cannot find module 'std.linalg' in the standard library")]),
    ('unknown_module_fn',
     'import std.math\nkernel k(p: ptr<f32>) {\n    p[0] = math.expp(p[1]);\n}\n',
     [(3, 17, "module 'math' has no fn 'expp'")]),
    ('register_without_dim',
     'kernel k(p: ptr<i32>) {\n    p[0] = thread_id;\n}\n',
     [(2, 12, 'thread_id has three dimensions')]),
    ('lane_out_of_range',
     'kernel k(p: ptr<vec<f32, 2>>, q: ptr<f32>) {\n    let v = p[0];\n    q[0] = v.z;\n}\n',
     [(3, 14, 'lane .z (2) is out of range for vec<f32, 2>')]),
    ('array_index_out_of_bounds',
     'kernel k(p: ptr<f32>) {\n    var a: [f32; 4];\n    a[4] = 1.0;\n}\n',
     [(3, 7, 'index 4 is out of bounds (0 to 3)')]),
    ('bitcast_size',
     'kernel k(p: ptr<f32>, q: ptr<u16>) {\n    q[0] = bitcast[u16](p[0]);\n}\n',
     [(2, 12, 'cannot bitcast f32 (4 bytes) to u16 (2 bytes): sizes differ')]),
    ('atomic_and_float',
     'kernel k(p: ptr<f32>) {\n    atomic_and(p, 1.0);\n}\n',
     [(2, 16, 'atomic_and needs an integer pointee, found ptr<f32>')]),
    ('bad_memory_order',
     'kernel k(p: ptr<i32>) {\n    atomic_add(p, 1, order = "strong");\n}\n',
     [(2, 30, "order must be one of: 'relaxed', 'acquire', 'release', 'acq_")]),
    ('unknown_kwarg',
     'kernel k(p: ptr<i32>) {\n    atomic_add(p, 1, ordering = 1);\n}\n',
     [(2, 22, "atomic_add has no keyword argument 'ordering'")]),
    ('load_pointee_mismatch',
     'kernel k(p: ptr<f32>) {\n    let v = load[vec<f16, 8>](p);\n}\n',
     [(2, 31, 'load[vec<f16, 8>] needs a ptr<f16>, found ptr<f32>')]),
    ('range_step_zero',
     'kernel k(p: ptr<f32>, n: i32) {\n    for i in range(0, n, 0) { }\n}\n',
     [(2, 26, 'range step is 0')]),
    ('for_not_range',
     'kernel k(p: ptr<f32>, n: i32) {\n    for i in n { }\n}\n',
     [(2, 14, 'a for loop iterates over range(...)')]),
    ('var_without_type',
     'kernel k() {\n    var x;\n}\n',
     [(2, 9, "var 'x' needs a type or an initial value")]),
    ('float_comptime_param',
     'kernel k[ALPHA: f32 = 1.0](p: ptr<f32>) {\n}\n',
     [(1, 17, "compile-time parameter 'ALPHA' has type f32; expected 'type'")]),
    ('default_wrong_kind',
     'kernel k[N: i32 = f32](p: ptr<f32>) {\n}\n',
     [(1, 19, "default of compile-time parameter 'N' is f32; expected int")]),
    ('type_as_value',
     'kernel k(p: ptr<f32>) {\n    p[0] = f32;\n}\n',
     [(2, 12, 'f32 is a type, not a value')]),
    ('whole_array_assign',
     'kernel k(p: ptr<f32>) {\n    var a: [f32; 4];\n    var b: [f32; 4];\n    a = b;\n}\n',
     [(4, 9, 'cannot assign a whole array ([f32; 4])')]),
    ('shift_out_of_range',
     'kernel k(p: ptr<u32>) {\n    p[0] = p[1] << 32;\n}\n',
     [(2, 12, 'shift by 32 is out of range for u32 (0 to 31)')]),
    ('comptime_division_by_zero',
     'kernel k[N: i32 = 0](p: ptr<i32>) {\n    var a: [i32; 8 / N];\n}\n',
     [(2, 18, 'division by zero in a compile-time expression')]),
    ('cannot_infer_fn_param',
     'fn zero[T: type]() -> T {\n    return T(0);\n}\nkernel k(p: ptr<f32>) {\n    p[0] = zero();\n}\n',
     [(5, 12, "cannot infer compile-time parameter 'T' of fn 'zero'")]),
    ('vector_length_mismatch',
     'kernel k(a: ptr<vec<f32, 4>>, b: ptr<vec<f32, 2>>) {\n    a[0] = a[0] + b[0];\n}\n',
     [(2, 12, "cannot apply '+' to vec<f32, 4> and vec<f32, 2>: lengths dif")]),
    ('address_space_mismatch',
     'fn f(p: ptr<f32>) {}\nkernel k() {\n    shared t: [f32; 8];\n    f(t);\n}\n',
     [(4, 7, "cannot pass ptr<f32, shared> as argument 1 ('p': ptr<f32>) o")]),
    ('not_on_int',
     'kernel k(p: ptr<i32>) {\n    if !p[0] { }\n}\n',
     [(2, 8, "'!' needs a bool, found i32")]),
    ('call_non_function',
     'kernel k(p: ptr<f32>) {\n    p[0] = p(1.0);\n}\n',
     [(2, 12, 'cannot call a value of type ptr<f32>')]),
    ('kernel_return_type',
     'kernel k(p: ptr<f32>) -> f32 {\n}\n',
     [(1, 26, "kernel 'k' declares a return type; kernels return nothing")]),
    ('shared_not_array',
     'kernel k() {\n    shared t: f32;\n}\n',
     [(2, 15, "shared 't' has type f32; shared declarations are arrays")]),
    ('array_length_zero',
     'kernel k() {\n    var a: [f32; 0];\n}\n',
     [(2, 18, 'array length 0 is out of range (1 to 67108864)')]),
    ('unroll_budget',
     'kernel k(p: ptr<f32>) {\n    for i in comptime range(100000) { p[i] = 0.0; }\n}\n',
     [(2, 23, 'comptime for loops unroll more than 65536 iterations in all')]),
    ('range_outside_for',
     'kernel k(p: ptr<i32>) {\n    p[0] = range(4);\n}\n',
     [(2, 12, 'range(...) is only used in a for loop')]),
    ('many_errors',
     'kernel k(p: ptr<f32>, n: i32) {\n    p[0] = undefined1;\n    let y = 1;\n    y = 2;\n    p[1] = undefined2;\n}\n',
     [(2, 12, "unknown name 'undefined1'"), (4, 5, "cannot assign to 'y': it was declared with let"), (5, 12, "unknown name 'undefined2'")]),
    ('many_type_errors',
     'kernel k(p: ptr<f16>, n: i32, u: u32) {\n    p[0] = p[1] * 2.0f32;\n    let a = n + u;\n    let b = a + 1;\n    p[1] = f16(n) * 0.5;\n    if n { }\n}\n',
     [(2, 12, 'cannot store f32 into ptr<f16>'), (3, 13, "cannot mix signed i32 and unsigned u32 in '+'"), (6, 8, 'a condition must be bool, found i32')]),
    ('many_syntax_errors',
     'fn a() {\n    let = 1;\n}\nfn b() {\n    x = = 2;\n}\nkernel c() {\n    return\n}\n',
     [(2, 9, "unexpected '=', expected a name"), (5, 9, "unexpected '='"), (8, 11, "expected ';' after this, found '}'")]),
    ('comptime_param_does_not_fit',
     'kernel k[N: u8 = 300](p: ptr<f32>) {\n}\n',
     [(1, 18, "default 300 of 'N' does not fit in u8")]),
    ('store_wrong_vector',
     'kernel k(p: ptr<f16>, q: ptr<f32>) {\n    store(p, load[vec<f32, 4>](q));\n}\n',
     [(2, 14, 'cannot store vec<f32, 4> into ptr<f16>')]),
    ('shuffle_too_wide',
     'kernel k(p: ptr<vec<f32, 8>>) {\n    p[0] = shuffle(p[0], 1);\n}\n',
     [(2, 20, 'shuffle takes values of at most 16 bytes, found vec<f32, 8> (32 bytes)')]),
    ('ballot_not_bool',
     'kernel k(p: ptr<u64>, n: i32) {\n    p[0] = ballot(n);\n}\n',
     [(2, 19, 'ballot takes a bool, found i32')]),
    ('and_not_bool',
     'kernel k(p: ptr<f32>, n: i32) {\n    if n && true { }\n}\n',
     [(2, 8, "'&&' needs bool operands, found i32")]),
    # printf: the argument under the caret for a type mismatch, the conversion inside the format for a
    # malformed format (escapes before it counted as written), the call for a count mismatch
    ('printf_float_for_d',
     'kernel k(p: ptr<f32>) {\n    printf("%d\\n", p[0]);\n}\n',
     [(2, 20, "'%d' expects an integer, found f32: write %f (or %g, %e) to ")]),
    ('printf_int_for_f',
     'kernel k(n: i32) {\n    printf("n = %f\\n", n);\n}\n',
     [(2, 24, "'%f' expects a floating-point value, found i32: write %d (or")]),
    ('printf_int_literal_for_f',
     'kernel k() {\n    printf("%f\\n", 1);\n}\n',
     [(2, 20, "'%f' expects a floating-point value, found integer literal 1")]),
    ('printf_wide_for_d',
     'kernel k(n: i64) {\n    printf("%d\\n", n);\n}\n',
     [(2, 20, "'%d' expects an integer of at most 32 bits, found i64: write")]),
    ('printf_int_for_s',
     'kernel k(n: i32) {\n    printf("%s\\n", n);\n}\n',
     [(2, 20, "'%s' expects a string (a string literal or ptr<u8>), found i")]),
    ('printf_float_ptr_for_s',
     'kernel k(p: ptr<f32>) {\n    printf("%s\\n", p);\n}\n',
     [(2, 20, "'%s' expects a string (a string literal or ptr<u8>), found p")]),
    ('printf_int_for_p',
     'kernel k(n: u64) {\n    printf("%p\\n", n);\n}\n',
     [(2, 20, "'%p' expects a pointer, found u64")]),
    ('printf_vector',
     'kernel k(p: ptr<vec<f32, 4>>) {\n    printf("%f\\n", p[0]);\n}\n',
     [(2, 20, 'printf cannot print a vector (vec<f32, 4>): print its lanes ')]),
    ('printf_string_for_d',
     'kernel k() {\n    printf("%d\\n", "seven");\n}\n',
     [(2, 20, "'%d' expects an integer, found a string literal")]),
    ('printf_too_few',
     'kernel k(n: i32) {\n    printf("%d %d\\n", n);\n}\n',
     [(2, 5, 'format expects 2 arguments, got 1')]),
    ('printf_too_many',
     'kernel k(n: i32) {\n    printf("n\\n", n);\n}\n',
     [(2, 5, 'format expects 0 arguments, got 1')]),
    ('printf_star_counts',
     'kernel k(n: i32) {\n    printf("%*d\\n", n);\n}\n',
     [(2, 5, 'format expects 2 arguments, got 1')]),
    ('printf_not_literal',
     'kernel k(n: i32) {\n    let f = "%d";\n    printf(f, n);\n}\n',
     [(3, 12, "printf's format must be a string literal, so that it can be ")]),
    ('printf_unknown_conversion',
     'kernel k(n: i32) {\n    printf("\\tn = %y\\n", n);\n}\n',
     [(2, 19, "unknown conversion '%y' in format specifier '%y' (expected o")]),
    ('printf_escapes_before_error',
     'kernel k(n: i32) {\n    printf("\\x41\\u00e9 %5.2k", n);\n}\n',
     [(2, 24, "unknown conversion '%k' in format specifier '%5.2k' (expecte")]),
    ('printf_percent_n',
     'kernel k(n: i32) {\n    printf("%d%n", n, n);\n}\n',
     [(2, 15, '%n is not supported: it writes the number of characters prin')]),
    ('printf_incomplete',
     'kernel k(n: i32) {\n    printf("100%", n);\n}\n',
     [(2, 16, 'incomplete format specifier: the format ends before the conv')]),
    ('printf_undefined_flag',
     'kernel k(n: i32) {\n    printf("%#d", n);\n}\n',
     [(2, 13, "flag '#' is not allowed with %d (in '%#d'): its result is un")]),
    ('printf_long_double',
     'kernel k(x: f64) {\n    printf("%Lf", x);\n}\n',
     [(2, 13, "'%Lf' prints a long double, which kernels do not have: write")]),
    ('printf_star_width_float',
     'kernel k(x: f64) {\n    printf("%*f", x, x);\n}\n',
     [(2, 19, "the width of '%*f' expects an integer, found f64")]),
    ('printf_nul_in_format',
     'kernel k(n: i32) {\n    printf("a\\0%d", n);\n}\n',
     [(2, 14, 'the format holds a NUL character (\\0), which would end it ea')]),
    ('printf_result_used',
     'kernel k(p: ptr<i32>) {\n    p[0] = printf("x");\n}\n',
     [(2, 12, 'this call returns nothing; its value cannot be used')]),
    ('printf_literal_too_big',
     'kernel k() {\n    printf("%u", 5000000000);\n}\n',
     [(2, 18, "integer literal 5000000000 does not fit the 32 bits '%u' rea")]),
    ('printf_two_errors',
     'kernel k(n: i32, x: f32) {\n    printf("%f", n);\n    printf("%d", x);\n}\n',
     [(2, 18, "'%f' expects a floating-point value, found i32: write %d (or"),
      (3, 18, "'%d' expects an integer, found f32: write %f (or %g, %e) to ")]),
    # a keyword glued to a name is one name (the lexer had read 'kernelk(' as 'kernel k(')
    ('keyword_glued_to_a_name_at_top_level',
     'kernelk(x: ptr<f32>) {\n    x[0] = 1.0;\n}\n',
     [(1, 1, "unexpected name 'kernelk', expected one of 'const', 'fn', 'import', 'kernel', 'struct'")]),
    ('keyword_glued_in_a_for',
     'kernel k(x: ptr<i32>) {\n    for i incomptime range(4) {\n        x[i] = i;\n    }\n}\n',
     [(2, 11, "unexpected name 'incomptime', expected 'in'")]),
    ('keyword_glued_in_a_body',
     'kernel k(x: ptr<i32>) {\n    letv = 3;\n    x[0] = letv;\n}\n',
     [(2, 5, "unknown name 'letv'"), (3, 12, "unknown name 'letv'")]),
]


def test_enough_cases():
    assert len(CASES) >= 35
    assert len({c[0] for c in CASES}) == len(CASES)
    assert len({c[1] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name, src, expected", CASES, ids=[c[0] for c in CASES])
def test_golden(name, src, expected):
    diags = diagnose(src)
    got = [(d.span.line, d.span.col, d.message) for d in diags]
    assert len(got) == len(expected), got
    for (line, col, msg), (el, ec, frag) in zip(got, expected):
        assert (line, col) == (el, ec), got
        assert frag in msg, got
    for d in diags:
        assert d.severity == "error"
        text = d.render()
        assert text.startswith(f"bad.kc:{d.span.line}:{d.span.col}: error: ")
        assert "^" in text.splitlines()[3]


@pytest.mark.parametrize("name, hint", [
    ("narrowing_store", "write f32(x) to convert"),
    ("narrowing_assign", "write f16(x) to convert"),
    ("narrowing_return", "write f16(x) to convert"),
    ("signed_unsigned_mix", "write u32(x) or i32(x)"),
    ("int_float_mix", "write f32(x)"),
    ("unknown_name", "did you mean 'floor'?"),
    ("unknown_type", "did you mean 'f32'?"),
    ("assign_to_let", "var x"),
    ("assign_to_loop_var", "for var i in"),
    ("self_recursion", "rewrite it as a loop"),
    ("shared_in_fn", "ptr<T, shared>"),
    ("missing_semicolon", "add ';'"),
    ("condition_not_bool", "x != 0"),
    ("missing_module", "std.math"),
    ("printf_too_few", "the format's conversions: %d %d"),
    ("printf_star_counts", "each '*' width or precision reads an i32 argument too"),
    ("printf_not_literal", 'printf("i = %d, x = %f\\n", i, x)'),
    ("printf_int_literal_for_f", "write 1.0"),
])
def test_hints(name, hint):
    src = next(c[1] for c in CASES if c[0] == name)
    assert hint in (diagnose(src)[0].hint or "")


def test_rendering_matches_the_language_page():
    (d,) = diagnose("kernel k(out: ptr<f32>, x: f64) {\n    let i = 0;\n    out[i] = x * 2.0;\n}\n")
    assert d.render() == (
        "bad.kc:3:14: error: cannot store f64 into ptr<f32>\n"
        "  |\n"
        "3 |     out[i] = x * 2.0;\n"
        "  |              ^^^^^^^\n"
        "  = help: write f32(x) to convert")
    page = (ROOT / "docs" / "LANGUAGE.md").read_text()
    assert d.render() in page


def test_errors_in_imported_files_name_that_file(tmp_path):
    (tmp_path / "lib.kc").write_text("fn f(x: f32) -> f16 {\n    return x;\n}\n")
    main = tmp_path / "main.kc"
    main.write_text("import lib\nkernel k(p: ptr<f16>) {\n    p[0] = lib.f(1.0);\n}\n")
    with pytest.raises(CompileError) as e:
        lower(load_program(main.read_text(), str(main)), NV)
    (d,) = e.value.diagnostics
    assert d.span.file.path.endswith("lib.kc") and (d.span.line, d.span.col) == (2, 12)
    (tmp_path / "broken.kc").write_text("fn g( {\n")
    main.write_text("import broken\nkernel k() {}\n")
    with pytest.raises(CompileError) as e:
        load_program(main.read_text(), str(main))
    assert e.value.diagnostics[0].span.file.path.endswith("broken.kc")


def test_generic_errors_appear_at_specialisation():
    src = "kernel k[T: type](p: ptr<T>) {\n    p[0] = 1.5;\n}\n"
    program = load_program(src, "g.kc")
    check(program, NV)  # nothing to specialise: parse-checked only
    from kcompiler.ir.types import F32, I32
    lower(program, NV, {"k": {"T": F32}})
    with pytest.raises(CompileError, match=r"g.kc:2:12: error: cannot store float literal 1.5 into ptr<i32>"):
        lower(program, NV, {"k": {"T": I32}})


def test_errors_depend_on_the_target():
    src = "kernel k(p: ptr<f32>) {\n    comptime if warp_size == 64 {\n        p[0] = p;\n    }\n}\n"
    assert diagnose(src, NV) == []
    (d,) = diagnose(src, AMD)
    assert (d.span.line, d.span.col) == (3, 16)


# --- fuzzing ------------------------------------------------------------------------------------

def only_compile_errors(src: str) -> None:
    """Load and check ``src``; anything but success or CompileError fails the test."""
    try:
        program = load_program(src, "fuzz.kc", keep_going=True)
        check(program, NV)
    except CompileError as e:
        assert e.diagnostics and str(e)


TOKENS = ["kernel", "fn", "let", "var", "shared", "if", "else", "for", "in", "while", "break", "continue",
          "return", "comptime", "import", "as", "true", "false", "ptr", "vec", "range", "std", "math",
          "printf", "\"%d %s\"", "\"%*.*f\\n\"",
          "x", "p", "T", "N", "f32", "f16", "i32", "u64", "bool", "type", "thread_id", "barrier",
          "load", "store", "bitcast", "atomic_add", "shuffle_down", "warp_size", "target", "has",
          "f8e4m3", "e8m0", "f4e2m1", "convert", "saturate",
          "0", "1", "2.5", "0x1F", "1e-3", "3u8", "\"s\"", "(", ")", "[", "]", "{", "}", "<", ">", ",",
          ";", ":", ".", "->", "=", "+=", "<<=", "+", "-", "*", "/", "%", "==", "!=", "<=", ">=", "&&",
          "||", "!", "~", "&", "|", "^", "<<", ">>", "//", "/*", "*/", "\n"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(data):
    only_compile_errors(data.decode("utf-8", errors="replace"))
    only_compile_errors(data.decode("latin-1"))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=80))
def test_fuzz_token_soup(tokens):
    only_compile_errors(" ".join(tokens))


_PREFIX = ["kernel k(p: ptr<f32>, q: ptr<i32>, n: i32) {", "fn f[T: type](x: T) -> T {"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_PREFIX), st.lists(st.sampled_from(TOKENS), max_size=40), st.booleans())
def test_fuzz_token_soup_in_a_body(prefix, tokens, close):
    only_compile_errors(prefix + " " + " ".join(tokens) + (" }" if close else ""))


SOURCES = [p.read_text() for p in sorted(PROGRAMS.glob("*.kc")) + sorted(EXAMPLES.glob("*.kc"))]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SOURCES), st.integers(min_value=0, max_value=10_000))
def test_fuzz_truncations(src, cut):
    only_compile_errors(src[: cut % (len(src) + 1)])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # 200: CI time
@given(st.sampled_from(SOURCES), st.integers(min_value=0), st.integers(min_value=0, max_value=12),
       st.sampled_from(TOKENS + ["", " ", "1000000000000", "-1", "0.0", "f64", "u8"]))
def test_fuzz_mutations(src, pos, length, insert):
    pos %= len(src) + 1
    only_compile_errors(src[:pos] + insert + src[pos + length:])


def test_fuzz_token_swaps_of_programs():
    """Deterministic: replace each of many tokens of every program by another token."""
    rng = random.Random(1234)
    for src in SOURCES:
        words = src.split(" ")
        for _ in range(30):  # 30 a program: CI time
            w = list(words)
            i = rng.randrange(len(w))
            w[i] = rng.choice(TOKENS)
            only_compile_errors(" ".join(w))


def test_a_program_with_errors_never_lowers():
    """The error type given to an undefined name is for checking only: lower() refuses a program the
    loader kept errors in (load_program(keep_going=True)), with those errors."""
    for src, (line, col, msg) in [
            ("kernel k(out: ptr<f32>) {\n    out[0] = nope;\n    out[1] = 2.0;\n}\n",
             (2, 14, "unknown name 'nope'")),
            ("kernel k(out: ptr<f32>) {\n    break;\n}\n", (2, 5, "'break' outside of a loop"))]:
        program = load_program(src, "bad.kc", keep_going=True)
        with pytest.raises(CompileError) as e:
            lower(program, NV)
        assert [(d.span.line, d.span.col, d.message) for d in e.value.diagnostics] == [(line, col, msg)]
