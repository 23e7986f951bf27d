"""The CPU as /proc/cpuinfo names it, for the benchmark scripts' JSON results."""

ISA_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16")


def cpu_id():
    """/proc/cpuinfo's vendor, family and model numbers (they name the core, Zen 4 or Emerald Rapids,
    where a virtual machine's model name often does not), its model name, and the ISA flags amp uses;
    {} where there is no /proc/cpuinfo."""
    info = {}
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("vendor_id", "cpu family", "model", "model name") and key not in info:
                info[key] = value.strip()
            if key == "flags":
                flags = value.split()
                info["isa"] = [f for f in ISA_FLAGS if f in flags]
                break
    except OSError:
        pass
    return info
