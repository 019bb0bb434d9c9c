"""real_backend"""
