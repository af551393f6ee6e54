"""Lowering tests for the AMDGCN target: kernel-language sources → AMDGCN assembly, checked
FileCheck-style for every architecture (no AMD GPU exists here: what the assembly says is what can be
checked), and linked into code objects with ld.lld."""
from __future__ import annotations

import pytest

from kcompiler.backends.amdgcn import ARCHS, AmdgcnTarget
from kcompiler.backends.target import CompileOptions
from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ...filecheck_util import filecheck

WAVE64 = [a for a, (w, _) in ARCHS.items() if w == 64]
WAVE32 = [a for a, (w, _) in ARCHS.items() if w == 32]

VADD = """
kernel vadd(a: ptr<f32>, b: ptr<f32>, out: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        out[i] = a[i] + b[i];
    }
}
"""


def asm(src: str, arch: str, **params) -> str:
    return compile_source_to(src, "t.kc", "asm", "amdgcn", arch, comptime=params or None)


def test_archs_and_wave_sizes():
    assert sorted(ARCHS) == ["gfx1100", "gfx1201", "gfx90a", "gfx942", "gfx950"]
    assert {a: AmdgcnTarget(a).warp_size for a in ARCHS} == {
        "gfx90a": 64, "gfx942": 64, "gfx950": 64, "gfx1100": 32, "gfx1201": 32}
    with pytest.raises(ValueError, match="unknown AMD architecture 'gfx9000'"):
        AmdgcnTarget("gfx9000")


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_vadd_every_arch(arch):
    wave = ARCHS[arch][0]
    text = asm(VADD, arch)
    filecheck(text, f"""
        CHECK: .amdgcn_target "amdgcn-amd-amdhsa--{arch}"
        CHECK: .amdhsa_code_object_version 5
        CHECK-LABEL: vadd:
        CHECK: global_load_{{{{dword|b32}}}}
        CHECK: global_load_{{{{dword|b32}}}}
        CHECK: v_add_f32
        CHECK: global_store_{{{{dword|b32}}}}
        CHECK: s_endpgm
        CHECK: .amdhsa_kernel vadd
        CHECK: .amdhsa_group_segment_fixed_size 0
        CHECK: amdhsa.kernels:
        CHECK: .name: a
        CHECK-NEXT: .offset: 0
        CHECK-NEXT: .size: 8
        CHECK: .name: n
        CHECK-NEXT: .offset: 24
        CHECK-NEXT: .size: 4
        CHECK-NEXT: .value_kind: by_value
        CHECK: .offset: 44
        CHECK-NEXT: .size: 2
        CHECK-NEXT: .value_kind: hidden_group_size_x
        CHECK: .wavefront_size: {wave}
        CHECK: amdhsa.version:
        CHECK-NEXT: - 1
        CHECK-NEXT: - 2
    """)


def test_block_dim_and_grid_dim_come_from_the_implicit_arguments():
    """block_dim.x is the u16 hidden_group_size_x at byte 12 of the implicit arguments, which follow
    the 8 bytes of ``out`` (kernarg offset 8 + 12 = 0x14); grid_dim.y the u32 hidden_block_count_y at
    byte 4 (8 + 4 = 0xc)."""
    src = """
    kernel dims(out: ptr<u32>) {
        out[0] = u32(block_dim.x);
        out[1] = u32(grid_dim.y);
    }
    """
    filecheck(asm(src, "gfx942"), """
        CHECK-LABEL: dims:
        CHECK-DAG: s_load_dword {{s[0-9]+}}, s[0:1], 0x14
        CHECK-DAG: s_load_dword {{s[0-9]+}}, s[0:1], 0xc
        CHECK: .value_kind: hidden_block_count_y
    """)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_barrier_is_s_barrier_between_workgroup_fences(arch):
    src = """
    kernel rev(x: ptr<f32>) {
        shared tile: [f32; 256];
        tile[thread_id.x] = x[thread_id.x];
        barrier();
        x[thread_id.x] = tile[255 - thread_id.x];
    }
    """
    filecheck(asm(src, arch), """
        CHECK-LABEL: rev:
        CHECK: ds_{{write|store}}_b32
        CHECK: s_waitcnt
        CHECK: s_barrier
        CHECK: ds_{{read|load}}_b32
        CHECK: .amdhsa_group_segment_fixed_size 1024
        CHECK: .group_segment_fixed_size: 1024
    """)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_16_byte_vector_loads(arch):
    src = """
    kernel scale(x: ptr<f32>, y: ptr<f32>) {
        let i = (block_id.x * block_dim.x + thread_id.x) * 4;
        store(y + i, load[vec<f32, 4>](x + i) * 2.0);
    }
    """
    load, store = ("global_load_b128", "global_store_b128") if arch.startswith("gfx1") else \
        ("global_load_dwordx4", "global_store_dwordx4")
    filecheck(asm(src, arch), f"""
        CHECK-LABEL: scale:
        CHECK: {load}
        CHECK: {store}
    """)


SHUFFLE = """
kernel warp_sum(x: ptr<f32>, out: ptr<f32>) {
    var v = x[thread_id.x];
    var off = warp_size / 2;
    while off > 0 {
        v += shuffle_xor(v, off);
        off /= 2;
    }
    if lane_id == 0 {
        out[thread_id.x / warp_size] = v;
    }
}
"""


@pytest.mark.parametrize("arch", WAVE64)
def test_shuffles_are_ds_bpermute_on_wave64(arch):
    # lane_id over 64 lanes needs both halves of the exec mask: mbcnt lo then hi.
    filecheck(asm(SHUFFLE, arch), """
        CHECK-LABEL: warp_sum:
        CHECK: v_mbcnt_lo_u32_b32
        CHECK: v_mbcnt_hi_u32_b32
        CHECK: ds_bpermute_b32
        CHECK: .wavefront_size: 64
    """)


@pytest.mark.parametrize("arch", WAVE32)
def test_shuffles_are_ds_bpermute_on_wave32(arch):
    text = asm(SHUFFLE, arch)
    filecheck(text, """
        CHECK-LABEL: warp_sum:
        CHECK: v_mbcnt_lo_u32_b32
        CHECK: ds_bpermute_b32
        CHECK: .amdhsa_wavefront_size32 1
        CHECK: .wavefront_size: 32
    """)
    assert "v_mbcnt_hi_u32_b32" not in text


def test_wave32_and_wave64_code_differ_in_mask_width():
    """A ballot is a 64-bit SGPR pair on wave64 (gfx942) and one 32-bit SGPR on wave32 (gfx1100)."""
    src = """
    kernel vote(x: ptr<f32>, out: ptr<u64>) {
        let m = ballot(x[thread_id.x] > 0.0);
        if thread_id.x == 0 {
            out[0] = m;
        }
    }
    """
    filecheck(asm(src, "gfx942"), """
        CHECK-LABEL: vote:
        CHECK: v_cmp_{{[a-z_0-9]+}} {{(vcc|s\\[[0-9]+:[0-9]+\\])}}
    """)
    filecheck(asm(src, "gfx1100"), """
        CHECK-LABEL: vote:
        CHECK: v_cmp_{{[a-z_0-9]+}} {{(vcc_lo|s[0-9]+)}},
    """)


@pytest.mark.parametrize("scope, llvm_scope", [("block", 'syncscope("workgroup")'),
                                               ("device", 'syncscope("agent")'), ("system", "")])
def test_atomic_scopes(scope, llvm_scope):
    src = f"""
    kernel count(c: ptr<u32>) {{
        atomic_add(c, 1u32, scope = "{scope}");
    }}
    """
    ll = compile_source_to(src, "t.kc", "llvm", "amdgcn", "gfx942")
    line = next(x for x in ll.splitlines() if "atomicrmw" in x)
    assert "atomicrmw add" in line
    if llvm_scope:
        assert llvm_scope in line
    else:
        assert "syncscope" not in line
    assert "global_atomic_add" in asm(src, "gfx942")


def test_private_arrays_live_in_address_space_5():
    src = """
    kernel priv(x: ptr<f32>, k: i32) {
        var a: [f32; 8];
        for i in range(0, 8) {
            a[i] = f32(i) * x[i];
        }
        x[0] = a[k & 7];
    }
    """
    ll = compile_source_to(src, "t.kc", "llvm", "amdgcn", "gfx942", options=CompileOptions(opt_level=0))
    assert "alloca [8 x float], align 4, addrspace(5)" in ll
    filecheck(asm(src, "gfx942"), """
        CHECK-LABEL: priv:
        CHECK: s_endpgm
    """)


def test_dynamic_shared_memory_links():
    src = """
    kernel dyn(x: ptr<f32>) {
        let s = dynamic_shared[f32]();
        s[thread_id.x] = x[thread_id.x];
        barrier();
        x[thread_id.x] = s[block_dim.x - 1 - thread_id.x];
    }
    """
    filecheck(asm(src, "gfx90a"), """
        CHECK-LABEL: dyn:
        CHECK: ds_write_b32
        CHECK: s_barrier
        CHECK: ds_read_b32
    """)
    obj = compile_source_to(src, "t.kc", "obj", "amdgcn", "gfx90a")
    assert obj[:4] == b"\x7fELF"


def test_f64_transcendentals_are_refused_with_a_location():
    src = "kernel k(x: ptr<f64>) {\n    x[0] = fast_sin(x[0]);\n}\n"
    with pytest.raises(CompileError) as e:
        asm(src, "gfx942")
    assert "t.kc:2:12" in str(e.value) and "std.math" in str(e.value)


# --- linking the code object ----------------------------------------------------------------------

def test_linker_search_order(monkeypatch, tmp_path):
    from kcompiler.backends.amdgcn import link

    fake = tmp_path / "ld.lld"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KC_LD_LLD", str(fake))
    assert link.ld_lld() == [str(fake)]
    monkeypatch.setenv("KC_LD_LLD", str(tmp_path / "missing"))
    with pytest.raises(link.LinkerUnavailable, match="KC_LD_LLD"):
        link.ld_lld()
    monkeypatch.delenv("KC_LD_LLD")
    rocm = tmp_path / "rocm"
    (rocm / "llvm" / "bin").mkdir(parents=True)
    (rocm / "llvm" / "bin" / "ld.lld").symlink_to(fake)
    monkeypatch.setenv("ROCM_PATH", str(rocm))
    assert link.ld_lld() == [str(rocm / "llvm" / "bin" / "ld.lld")]


def test_no_linker_is_a_clear_error(monkeypatch, tmp_path):
    from kcompiler.backends.amdgcn import link

    monkeypatch.delenv("KC_LD_LLD", raising=False)
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(link.importlib.util, "find_spec", lambda name: None)
    link.find_ld_lld.cache_clear()
    with pytest.raises(link.LinkerUnavailable, match="pip install ziglang"):
        link.ld_lld()
    link.find_ld_lld.cache_clear()


def test_link_error_keeps_the_linker_message():
    from kcompiler.backends.amdgcn import link

    with pytest.raises(link.LinkError, match="ld.lld failed"):
        link.link_code_object(b"not an object file")


def test_cli_writes_a_code_object(tmp_path):
    import subprocess
    import sys

    src = tmp_path / "vadd.kc"
    src.write_text(VADD)
    out = tmp_path / "k.hsaco"
    r = subprocess.run([sys.executable, "-m", "kcompiler.cli", "compile", str(src), "--target", "amdgcn",
                        "--arch", "gfx942", "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    assert data[:4] == b"\x7fELF" and int.from_bytes(data[18:20], "little") == 224  # EM_AMDGPU


# --- the machine operations std.hostcall is built from ---------------------------------------------

HOSTCALL_OPS = """
kernel k(a: ptr<u64>) {
    warp_sync();
    nanosleep(100);
    let b = hostcall_buffer();
    if b != 0u64 {
        hostcall_interrupt(3u32);
    }
    a[thread_id.x] = b;
}
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_hostcall_buffer_is_the_v5_hidden_argument(arch):
    """hostcall_buffer() reads the implicit argument at byte 80, which the code object's metadata
    then lists as hidden_hostcall_buffer at (implicit base + 80); a kernel that does not read it does
    not ask for a buffer."""
    text = asm(HOSTCALL_OPS, arch)
    filecheck(text, """
        CHECK-LABEL: k:
        CHECK: s_sleep 1
        CHECK: s_sendmsg sendmsg(MSG_INTERRUPT)
        CHECK: .offset: 8
        CHECK-NEXT: .size: 4
        CHECK-NEXT: .value_kind: hidden_block_count_x
        CHECK: .offset: 88
        CHECK-NEXT: .size: 8
        CHECK-NEXT: .value_kind: hidden_hostcall_buffer
    """)
    assert "hidden_hostcall_buffer" not in asm(VADD, arch)


def test_hostcall_ops_on_nvptx(tmp_path):
    ptx = compile_source_to(HOSTCALL_OPS, "t.kc", "asm", "nvptx", "sm_90a")
    filecheck(ptx, """
        CHECK: .visible .global .align 8 .u64 kc_hostcall_buffer;
        CHECK: bar.warp.sync
        CHECK: nanosleep.u32
        CHECK: ld.global{{.*}}[kc_hostcall_buffer]
    """)


def test_pointer_address_round_trip_on_cpu():
    import numpy as np

    import kcompiler as kc

    src = """
    kernel k(a: ptr<u64>, b: ptr<f32>) {
        a[0] = bitcast[u64](b);
        let p = bitcast[ptr<f32>](bitcast[u64](b) + 4u64);
        p[thread_id.x] = f32(thread_id.x) + 0.5;
    }
    """
    a, b = np.zeros(1, np.uint64), np.zeros(9, np.float32)
    kc.compile(src, target="cpu").k[1, 8](a, b)
    assert a[0] != 0
    np.testing.assert_array_equal(b, np.r_[0.0, np.arange(8) + 0.5].astype(np.float32))
    with pytest.raises(CompileError, match="cannot bitcast"):
        kc.compile("kernel k(a: ptr<f32, shared>) { let x = bitcast[u64](a); }", target="cpu")


FAST_MATH = """
import std.math
kernel fm(x: ptr<f32>, y: ptr<f32>) {
    y[0] = math.fast_exp(x[0]);
    y[1] = math.fast_log(x[1]);
    y[2] = math.fast_sin(x[2]);
    y[3] = math.fast_cos(x[3]);
    y[4] = math.fast_rsqrt(x[4]);
    y[5] = math.fast_rcp(x[5]);
    y[6] = math.fast_tanh(x[6]);
}
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx950", "gfx1100"])
def test_fast_math_is_the_hardware_instructions(arch):
    """std.math's fast versions are v_exp_f32, v_log_f32, v_sin_f32, v_cos_f32, v_rsq_f32,
    v_rcp_f32 (tanh from v_exp and v_rcp), with no call to any library."""
    text = asm(FAST_MATH, arch)
    for ins in ("v_exp_f32", "v_log_f32", "v_sin_f32", "v_cos_f32", "v_rsq_f32", "v_rcp_f32"):
        assert ins in text, ins
    assert "__ocml" not in text and "s_swappc" not in text and "s_setpc" not in text
