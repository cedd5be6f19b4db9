// Linked into a kernel through link= (tests/test_gpu.py): numba ABI device function.
extern "C" __device__ int add_one(int* ret, int x)
{
    *ret = x + 1;
    return 0;
}
