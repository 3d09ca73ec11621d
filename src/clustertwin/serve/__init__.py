"""The serving twin: LLM inference serving simulated request by request on the training side's specs
and pricing (issue 18). See docs/serving.md.

>>> r = predict_serving(ServeRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=1, num_requests=20,
...                                  input_len=256, output_len=32))
>>> sorted(k for k in r.to_json() if k.endswith("_s"))[:3]
['duration_s', 'e2e_latency_s', 'itl_s']
"""
from .engines import ENGINES, EngineProfile, get_engine
from .run import ServeRequest, ServeResult, build_setup, predict_serving, read_dataset
from .search import ServeSearchResult, parse_slo, serve_search
from .sim import Requests, SimResult, Simulator, make_requests
from .workload import MemoryPlan, ServeSetup, StepCost, StepPricer, memory_plan, parse_serve_plan

__all__ = ["ENGINES", "EngineProfile", "get_engine", "ServeRequest", "ServeResult", "build_setup", "predict_serving",
           "read_dataset", "ServeSearchResult", "parse_slo", "serve_search", "Requests", "SimResult", "Simulator",
           "make_requests", "MemoryPlan", "ServeSetup", "StepCost", "StepPricer", "memory_plan", "parse_serve_plan"]
