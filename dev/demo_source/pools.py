"""String pools the demo records are assembled from.

Every pool is built once at import time so that generating a record is only a
handful of list look-ups. Pool sizes are powers of two so a record can pick an
entry with a bit mask on its hash.
"""

from __future__ import annotations

from typing import Final

#: Job titles (32 entries, selected with 5 hash bits).
TITLES: Final[tuple[str, ...]] = (
    "Java开发工程师",
    "Python开发工程师",
    "前端开发工程师",
    "Go开发工程师",
    "C++开发工程师",
    "数据分析师",
    "算法工程师",
    "测试工程师",
    "运维工程师",
    "产品经理",
    "UI设计师",
    "大数据开发工程师",
    "嵌入式软件工程师",
    "Android开发工程师",
    "iOS开发工程师",
    "数据库管理员",
    "网络安全工程师",
    "项目经理",
    "技术支持工程师",
    "机器学习工程师",
    "DevOps工程师",
    "系统架构师",
    "销售经理",
    "人力资源专员",
    "财务会计",
    "市场营销专员",
    "客服专员",
    "行政助理",
    "运营专员",
    "新媒体运营",
    "硬件工程师",
    "实施工程师",
)

#: Cities (16 entries, selected with 4 hash bits).
#: An ASCII code per city (same order as :data:`CITIES`), sent as ``city_code`` by tasks created with ``city_codes``.
CITY_CODES: Final[tuple[str, ...]] = (
    "bj", "sh", "sz", "gz", "hz", "cd", "nj", "wh", "xa", "su", "cq", "tj", "cs", "zz", "hf", "xm"
)  # fmt: skip

CITIES: Final[tuple[str, ...]] = (
    "北京",
    "上海",
    "深圳",
    "广州",
    "杭州",
    "成都",
    "南京",
    "武汉",
    "西安",
    "苏州",
    "重庆",
    "天津",
    "长沙",
    "郑州",
    "合肥",
    "厦门",
)

_COMPANY_CORES: Final[tuple[str, ...]] = (
    "星辰",
    "云帆",
    "智汇",
    "华信",
    "博远",
    "启明",
    "恒通",
    "鼎盛",
    "天成",
    "瑞达",
    "金桥",
    "海纳",
    "新创",
    "卓越",
    "易联",
    "同辉",
    "中科",
    "汇智",
    "明德",
    "远景",
    "创新",
    "宏图",
    "锐思",
    "数联",
    "安信",
    "融通",
    "联众",
    "蓝海",
    "致远",
    "睿智",
    "正元",
    "光合",
)

_COMPANY_KINDS: Final[tuple[str, ...]] = ("科技", "信息技术", "网络科技", "软件")

#: Education requirements (8 entries, weighted by repetition).
EDUCATION: Final[tuple[str, ...]] = (
    "本科",
    "本科",
    "本科",
    "大专",
    "大专",
    "硕士",
    "不限",
    "博士",
)

_DESCRIPTION_PARTS: Final[tuple[str, ...]] = (
    "岗位职责：负责公司核心业务系统的设计、开发与维护，参与需求评审和技术方案讨论。",
    "Build and operate reliable services; write clean, tested code and review PRs.",
    "与产品、测试和运维团队紧密协作，保证项目按时高质量交付，持续优化系统性能与稳定性。",
    "Experience with Linux, Git, SQL and HTTP APIs is required; Docker is a plus.",
    "任职要求：计算机或相关专业，具备扎实的数据结构与算法基础，良好的编码习惯。",
    "Familiar with message queues such as Kafka or RabbitMQ, and with caching (Redis).",
    "具备较强的学习能力和沟通能力，责任心强，能够承受一定的工作压力，有团队合作精神。",
    "You will own features end to end: design, implementation, rollout, monitoring.",
    "福利待遇：五险一金、带薪年假、节日福利、定期体检、弹性工作时间、免费下午茶和年度旅游。",
    "Nice to have: cloud platforms (AWS, Aliyun), CI/CD pipelines, observability.",
    "有大型互联网项目经验者优先，熟悉分布式系统、高并发场景和微服务架构者优先考虑。",
    "We value ownership, curiosity and clear writing in both English and Chinese.",
    "工作地点位于市中心，交通便利，公司提供完善的培训体系和清晰的职业晋升通道。",
    "Strong debugging skills and measuring before optimising are expected.",
)

_DESCRIPTION_TARGET_BYTES: Final[int] = 1380
_BASE_MONTHS: Final[int] = 12


def _company_pool() -> tuple[tuple[str, ...], ...]:
    """Build the companies for every city.

    :return: one tuple of 128 company names (core x kind) per entry of :data:`CITIES`.
    """
    return tuple(
        tuple(f"{city}{core}{kind}有限公司" for core in _COMPANY_CORES for kind in _COMPANY_KINDS) for city in CITIES
    )


def _salary(index: int) -> str:
    """Render one salary range from a pool index.

    :param index: pool position, 0..255.
    :return: a string such as ``"15-25K·13薪"`` (the ``·N薪`` part only when N > 12).
    """
    low = 4 + (index * 7) % 37
    high = low + 3 + (index * 11) % 19
    months = _BASE_MONTHS + (index >> 5) % 5
    text = f"{low}-{high}K"
    return f"{text}·{months}薪" if months > _BASE_MONTHS else text


def _description(index: int) -> str:
    """Assemble one description of about 1.4 KB (UTF-8) from the fragments.

    :param index: which rotation of the fragments to start from.
    :return: the description text.
    """
    parts: list[str] = []
    size = 0
    position = index * 3
    while size < _DESCRIPTION_TARGET_BYTES:
        part = _DESCRIPTION_PARTS[position % len(_DESCRIPTION_PARTS)]
        parts.append(part)
        size += len(part.encode()) + 1
        position += 1
    return "\n".join(parts)


#: Companies per city: ``COMPANIES[city_index][company_index]`` (16 x 128).
COMPANIES: Final[tuple[tuple[str, ...], ...]] = _company_pool()

#: Salary ranges (256 entries, selected with 8 hash bits).
SALARIES: Final[tuple[str, ...]] = tuple(_salary(i) for i in range(256))

#: Pre-built descriptions (8 entries, selected with 3 hash bits).
DESCRIPTIONS: Final[tuple[str, ...]] = tuple(_description(i) for i in range(8))
