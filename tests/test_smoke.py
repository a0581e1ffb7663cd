"""ddlab.measure.smoke: the launch smoke checks leave nothing running at exit."""


def test_the_ddp_smoke_step_closes_its_group_before_python_exits():
    """The smoke's DDP step (the Slurm preflight) once aborted at exit on 2 Gloo processes
    ('terminate called without an active exception') because its DDP wrapper still held the
    group; like the training scripts it now drops the wrapper first, so no Gloo thread is left."""
    from _teardown import gloo_threads, threads_left
    from ddlab.measure import smoke
    left = gloo_threads(threads_left(smoke.__file__, "ddp-step"))
    assert left == {0: [], 1: []}, left
