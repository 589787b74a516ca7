"""The GPU emitter's LLVM IR builders compiled for this CPU, so that host tests can call
the rules every kernel emits (integer guards, Philox, fp8 conversions, mask intervals) and
compare them with Python: a module for the host, and its JIT engine."""
from llvmlite import binding as llvm
from llvmlite import ir


def host_module(name: str) -> ir.Module:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = ir.Module(name)
    module.triple = llvm.get_process_triple()
    return module


def jit(module: ir.Module, host_features: bool = False):
    """The module verified and compiled; keep the engine alive while its functions run.
    `host_features`: this CPU's (F16C lets LLVM convert halves inline, with no runtime)."""
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    target = llvm.Target.from_default_triple()
    machine = target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten()) \
        if host_features else target.create_target_machine(opt=2)
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    return engine
