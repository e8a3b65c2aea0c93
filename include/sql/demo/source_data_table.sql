-- Demo data for the executor DAGs, in the old design's shape: SOURCE_DATA_TABLE(ID, CATEGORY, PROVINCE,
-- CITY, DISTRICT). Idempotent: creates the table and fills it only when empty (about 3,000 rows).
CREATE SEQUENCE IF NOT EXISTS public.upms_area_id_seq START 101;
CREATE TABLE IF NOT EXISTS public.source_data_table (
    id       integer NOT NULL DEFAULT nextval('public.upms_area_id_seq'::regclass) PRIMARY KEY,
    category varchar(50),
    province varchar(50) NOT NULL,
    city     varchar(50),
    district varchar(50)
);
INSERT INTO public.source_data_table (category, province, city, district)
SELECT p.province, p.province, c.city, d.prefix || s.suffix
  FROM (VALUES
          ('北京市', ARRAY['北京市']),
          ('上海市', ARRAY['上海市']),
          ('天津市', ARRAY['天津市']),
          ('重庆市', ARRAY['重庆市']),
          ('广东省', ARRAY['广州市', '深圳市', '珠海市', '佛山市', '东莞市', '中山市', '惠州市', '汕头市']),
          ('浙江省', ARRAY['杭州市', '宁波市', '温州市', '嘉兴市', '绍兴市', '金华市', '台州市']),
          ('江苏省', ARRAY['南京市', '苏州市', '无锡市', '常州市', '南通市', '扬州市', '徐州市']),
          ('四川省', ARRAY['成都市', '绵阳市', '德阳市', '宜宾市', '南充市']),
          ('湖北省', ARRAY['武汉市', '宜昌市', '襄阳市', '荆州市']),
          ('湖南省', ARRAY['长沙市', '株洲市', '湘潭市', '衡阳市']),
          ('山东省', ARRAY['济南市', '青岛市', '烟台市', '潍坊市', '临沂市']),
          ('河南省', ARRAY['郑州市', '洛阳市', '开封市', '新乡市']),
          ('福建省', ARRAY['福州市', '厦门市', '泉州市', '漳州市']),
          ('陕西省', ARRAY['西安市', '宝鸡市', '咸阳市']),
          ('辽宁省', ARRAY['沈阳市', '大连市', '鞍山市']),
          ('云南省', ARRAY['昆明市', '大理市', '丽江市'])
       ) AS p(province, cities)
 CROSS JOIN LATERAL unnest(p.cities) AS c(city)
 CROSS JOIN (SELECT prefix FROM unnest(ARRAY['东', '西', '南', '北', '中', '新', '高新', '经开', '滨江', '湖滨',
                                            '城关', '开发', '朝阳', '和平', '长安', '青山', '白云', '龙华',
                                            '海港', '金山', '天河', '江北', '雨花', '鼓楼', '秀峰', '临江',
                                            '沙河', '松山', '桃源', '星湖', '凤凰', '月湖', '翠屏', '石门',
                                            '花溪', '清河', '南湖', '北塘', '西湖', '东湖', '玉泉', '云岩',
                                            '瑶海', '蜀山', '包河', '庐阳']) AS prefix) AS d
 CROSS JOIN (VALUES ('区')) AS s(suffix)
 WHERE NOT EXISTS (SELECT 1 FROM public.source_data_table);
